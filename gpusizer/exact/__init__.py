"""Exact memory: build the real model and count the live tensors of one real step.

``fit-model --exact`` and :func:`gpusizer.fit_model` with ``exact=True`` come here.
The model is built and run under PyTorch's ``FakeTensorMode`` on the CPU: tensors
carry shapes, dtypes and storage sizes but no data, so a 7B model allocates no
weights. A dispatch mode registers every tensor storage an ATen op returns and
frees it when PyTorch frees it; the peak of their sum is the step's peak tensor
memory. docs/method.md ("Exact mode") states how this differs from a CUDA run.

This package needs the ``torch`` extra (``pip install 'gpusizer[torch]'``). The
modules without a leading underscore import neither torch nor transformers, so
the rest of gpusizer can name what exact mode takes and returns for free.
"""

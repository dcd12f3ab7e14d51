"""Turning results into rich tables for people, or one JSON document for scripts."""

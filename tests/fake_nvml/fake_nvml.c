/*
 * fake_nvml.c: a tiny stand-in for libnvidia-ml.so.1, used by the probe tests.
 *
 * Build:  gcc -shared -fPIC -O1 -o libnvidia-ml.so.1 fake_nvml.c
 * Use:    LD_LIBRARY_PATH=<dir with the .so> FAKE_NVML_CONFIG=<config file> python ...
 *
 * It exports only the NVML entry points that the `pynvml` bindings (nvidia-ml-py)
 * call for the fields gpusizer's probe reads, with the argument and struct
 * layouts those bindings pass through ctypes. The machine it pretends to be is
 * read from the text file named by FAKE_NVML_CONFIG at init time; see README.md
 * in this folder for the format. If FAKE_NVML_LOG names a file, every call
 * appends its function name to it (so tests can check that nvmlShutdown ran).
 */

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* ---- struct layouts, as pynvml.py declares them ------------------------ */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION 0x02000028u

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* ---- the fake machine -------------------------------------------------- */

#define MAX_DEVICES 64
#define MAX_LINKS 36
#define MAX_PROCS 32
#define MAX_FAILS 48

/* Calls that a config can make fail, per device. */
static const char *FIELD_NAMES[] = {
    "handle", "name", "uuid", "pci_info", "memory_info", "memory_info_v2",
    "compute_capability", "ecc_mode", "ecc_errors", "power_usage", "power_limit",
    "power_management_limit", "temperature", "clock", "max_clock", "pcie_gen",
    "pcie_gen_max", "pcie_width", "pcie_width_max", "nvlink_state", "nvlink_remote",
    "nvlink_remote_type", "mig_mode", "utilization", "processes", "p2p", "topology",
    NULL,
};

enum {
    F_HANDLE, F_NAME, F_UUID, F_PCI, F_MEM, F_MEM_V2, F_CC, F_ECC_MODE, F_ECC_ERR,
    F_POWER, F_POWER_LIMIT, F_POWER_MGMT_LIMIT, F_TEMP, F_CLOCK, F_MAX_CLOCK,
    F_PCIE_GEN, F_PCIE_GEN_MAX, F_PCIE_WIDTH, F_PCIE_WIDTH_MAX, F_NVLINK_STATE,
    F_NVLINK_REMOTE, F_NVLINK_REMOTE_TYPE, F_MIG, F_UTIL, F_PROCS, F_P2P, F_TOPO,
    F_COUNT
};

typedef struct {
    int up;
    char remote_bus_id[32];
    unsigned int remote_type; /* 0 gpu, 1 ibmnpu, 2 switch */
    int present;
} link_t;

typedef struct {
    int index;
    char name[96];
    char uuid[96];
    char bus_id[32];
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    unsigned long long mem_total, mem_used, mem_free, mem_reserved;
    int cc_major, cc_minor;
    unsigned int ecc_current, ecc_pending;
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned int power_mw, power_limit_mw, power_mgmt_limit_mw;
    unsigned int temperature;
    unsigned int clocks[4];     /* graphics, sm, mem, video */
    unsigned int max_clocks[4];
    unsigned int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int nvlink_count;           /* links that exist; 0 = no NVLink at all */
    link_t links[MAX_LINKS];
    unsigned int mig_current, mig_pending;
    unsigned int util_gpu, util_mem;
    int nprocs;
    nvmlProcessInfo_t procs[MAX_PROCS];
    nvmlReturn_t fail[F_COUNT]; /* error to return per field; 0 = works */
    int lost_field;             /* field that loses the GPU; -1 = never */
    int lost;                   /* sticky: set once the GPU has been lost */
} device_t;

static device_t g_devices[MAX_DEVICES];
static int g_count = 0;
static int g_init_refcount = 0;
static nvmlReturn_t g_init_result = NVML_SUCCESS;
static char g_driver_version[80] = "550.54.15";
static char g_nvml_version[80] = "12.550.54.15";
static int g_cuda_version = 12040;
static unsigned int g_topology_level = 50; /* NVML_TOPOLOGY_SYSTEM */
static unsigned int g_p2p_read = 0;        /* NVML_P2P_STATUS_OK */
static int g_device_count_override = -1;

static void trace(const char *fn) {
    const char *path = getenv("FAKE_NVML_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", fn);
    fclose(f);
}

static void warnf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fake_nvml: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- config parsing ---------------------------------------------------- */

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    return s;
}

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static int field_index(const char *name) {
    for (int i = 0; FIELD_NAMES[i]; i++)
        if (strcmp(FIELD_NAMES[i], name) == 0) return i;
    return -1;
}

static const struct { const char *name; nvmlReturn_t code; } ERROR_NAMES[] = {
    {"ok", NVML_SUCCESS},
    {"success", NVML_SUCCESS},
    {"uninitialized", NVML_ERROR_UNINITIALIZED},
    {"invalid_argument", NVML_ERROR_INVALID_ARGUMENT},
    {"not_supported", NVML_ERROR_NOT_SUPPORTED},
    {"no_permission", NVML_ERROR_NO_PERMISSION},
    {"not_found", NVML_ERROR_NOT_FOUND},
    {"driver_not_loaded", NVML_ERROR_DRIVER_NOT_LOADED},
    {"timeout", NVML_ERROR_TIMEOUT},
    {"library_not_found", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"function_not_found", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"gpu_lost", NVML_ERROR_GPU_IS_LOST},
    {"gpu_is_lost", NVML_ERROR_GPU_IS_LOST},
    {"reset_required", NVML_ERROR_RESET_REQUIRED},
    {"lib_rm_version_mismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"unknown", NVML_ERROR_UNKNOWN},
    {NULL, 0},
};

static int error_code(const char *name, nvmlReturn_t *out) {
    for (int i = 0; ERROR_NAMES[i].name; i++) {
        if (strcmp(ERROR_NAMES[i].name, name) == 0) {
            *out = ERROR_NAMES[i].code;
            return 1;
        }
    }
    char *end;
    long v = strtol(name, &end, 10);
    if (*name && !*end) {
        *out = (nvmlReturn_t)v;
        return 1;
    }
    return 0;
}

/* "not_supported = a b c": set each named field's failure to `code`. */
static int set_fails(device_t *d, char *list, nvmlReturn_t code) {
    for (char *tok = strtok(list, " \t,"); tok; tok = strtok(NULL, " \t,")) {
        int f = field_index(tok);
        if (f < 0) {
            warnf("unknown field '%s'", tok);
            return 0;
        }
        d->fail[f] = code;
    }
    return 1;
}

static void parse_bus_id(const char *bus_id, unsigned int *domain, unsigned int *bus, unsigned int *dev) {
    unsigned int a = 0, b = 0, c = 0, fn = 0;
    if (sscanf(bus_id, "%x:%x:%x.%x", &a, &b, &c, &fn) == 4) {
        *domain = a; *bus = b; *dev = c;
    } else {
        *domain = 0; *bus = 0; *dev = 0;
    }
}

static void device_defaults(device_t *d, int index) {
    memset(d, 0, sizeof *d);
    d->index = index;
    snprintf(d->name, sizeof d->name, "Fake GPU %d", index);
    snprintf(d->uuid, sizeof d->uuid, "GPU-00000000-0000-0000-0000-%012d", index);
    snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", 0x10 + index);
    d->cc_major = 8;
    d->cc_minor = 0;
    d->lost_field = -1;
    d->pcie_gen = d->pcie_gen_max = 4;
    d->pcie_width = d->pcie_width_max = 16;
}

static int set_device_key(device_t *d, const char *key, char *value) {
    unsigned long long u = strtoull(value, NULL, 0);
    if (!strcmp(key, "name")) copy_str(d->name, sizeof d->name, value);
    else if (!strcmp(key, "uuid")) copy_str(d->uuid, sizeof d->uuid, value);
    else if (!strcmp(key, "pci_bus_id")) copy_str(d->bus_id, sizeof d->bus_id, value);
    else if (!strcmp(key, "pci_device_id")) d->pci_device_id = (unsigned int)u;
    else if (!strcmp(key, "pci_subsystem_id")) d->pci_subsystem_id = (unsigned int)u;
    else if (!strcmp(key, "memory_total")) d->mem_total = u;
    else if (!strcmp(key, "memory_used")) d->mem_used = u;
    else if (!strcmp(key, "memory_free")) d->mem_free = u;
    else if (!strcmp(key, "memory_reserved")) d->mem_reserved = u;
    else if (!strcmp(key, "compute_capability")) {
        if (sscanf(value, "%d.%d", &d->cc_major, &d->cc_minor) != 2) return 0;
    }
    else if (!strcmp(key, "ecc_current")) d->ecc_current = (unsigned int)u;
    else if (!strcmp(key, "ecc_pending")) d->ecc_pending = (unsigned int)u;
    else if (!strcmp(key, "ecc_corrected")) d->ecc_corrected = u;
    else if (!strcmp(key, "ecc_uncorrected")) d->ecc_uncorrected = u;
    else if (!strcmp(key, "power_usage_mw")) d->power_mw = (unsigned int)u;
    else if (!strcmp(key, "power_limit_mw")) d->power_limit_mw = (unsigned int)u;
    else if (!strcmp(key, "power_management_limit_mw")) d->power_mgmt_limit_mw = (unsigned int)u;
    else if (!strcmp(key, "temperature")) d->temperature = (unsigned int)u;
    else if (!strcmp(key, "graphics_clock")) d->clocks[0] = (unsigned int)u;
    else if (!strcmp(key, "sm_clock")) d->clocks[1] = (unsigned int)u;
    else if (!strcmp(key, "mem_clock")) d->clocks[2] = (unsigned int)u;
    else if (!strcmp(key, "video_clock")) d->clocks[3] = (unsigned int)u;
    else if (!strcmp(key, "graphics_clock_max")) d->max_clocks[0] = (unsigned int)u;
    else if (!strcmp(key, "sm_clock_max")) d->max_clocks[1] = (unsigned int)u;
    else if (!strcmp(key, "mem_clock_max")) d->max_clocks[2] = (unsigned int)u;
    else if (!strcmp(key, "video_clock_max")) d->max_clocks[3] = (unsigned int)u;
    else if (!strcmp(key, "pcie_gen")) d->pcie_gen = (unsigned int)u;
    else if (!strcmp(key, "pcie_gen_max")) d->pcie_gen_max = (unsigned int)u;
    else if (!strcmp(key, "pcie_width")) d->pcie_width = (unsigned int)u;
    else if (!strcmp(key, "pcie_width_max")) d->pcie_width_max = (unsigned int)u;
    else if (!strcmp(key, "nvlink_count")) d->nvlink_count = (int)u;
    else if (!strcmp(key, "nvlink")) {
        /* nvlink = <link> <remote bus id> [gpu|switch|npu] [down] */
        int link;
        char bus[32] = "", kind[16] = "gpu", state[16] = "up";
        int n = sscanf(value, "%d %31s %15s %15s", &link, bus, kind, state);
        if (n < 2 || link < 0 || link >= MAX_LINKS) return 0;
        link_t *l = &d->links[link];
        l->present = 1;
        l->up = strcmp(state, "down") != 0;
        copy_str(l->remote_bus_id, sizeof l->remote_bus_id, bus);
        l->remote_type = !strcmp(kind, "switch") ? 2 : !strcmp(kind, "npu") ? 1 : 0;
        if (link + 1 > d->nvlink_count) d->nvlink_count = link + 1;
    }
    else if (!strcmp(key, "mig_current")) d->mig_current = (unsigned int)u;
    else if (!strcmp(key, "mig_pending")) d->mig_pending = (unsigned int)u;
    else if (!strcmp(key, "utilization_gpu")) d->util_gpu = (unsigned int)u;
    else if (!strcmp(key, "utilization_memory")) d->util_mem = (unsigned int)u;
    else if (!strcmp(key, "processes")) {
        /* processes = pid:bytes pid:bytes ... */
        d->nprocs = 0;
        for (char *tok = strtok(value, " \t,"); tok && d->nprocs < MAX_PROCS; tok = strtok(NULL, " \t,")) {
            unsigned int pid = 0;
            unsigned long long bytes = 0;
            if (sscanf(tok, "%u:%llu", &pid, &bytes) < 1) return 0;
            nvmlProcessInfo_t *p = &d->procs[d->nprocs++];
            p->pid = pid;
            p->usedGpuMemory = bytes;
            p->gpuInstanceId = 0xFFFFFFFFu;
            p->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    else if (!strcmp(key, "not_supported")) return set_fails(d, value, NVML_ERROR_NOT_SUPPORTED);
    else if (!strcmp(key, "no_permission")) return set_fails(d, value, NVML_ERROR_NO_PERMISSION);
    else if (!strcmp(key, "gpu_lost")) {
        int f = field_index(value);
        if (f < 0) return 0;
        d->lost_field = f;
    }
    else if (!strncmp(key, "error.", 6)) {
        int f = field_index(key + 6);
        nvmlReturn_t code;
        if (f < 0 || !error_code(value, &code)) return 0;
        d->fail[f] = code;
    }
    else return 0;
    return 1;
}

static int set_host_key(const char *key, char *value) {
    if (!strcmp(key, "init")) return error_code(value, &g_init_result);
    if (!strcmp(key, "driver_version")) copy_str(g_driver_version, sizeof g_driver_version, value);
    else if (!strcmp(key, "nvml_version")) copy_str(g_nvml_version, sizeof g_nvml_version, value);
    else if (!strcmp(key, "cuda_driver_version")) g_cuda_version = atoi(value);
    else if (!strcmp(key, "topology_level")) g_topology_level = (unsigned int)strtoul(value, NULL, 0);
    else if (!strcmp(key, "p2p_read")) g_p2p_read = (unsigned int)strtoul(value, NULL, 0);
    else if (!strcmp(key, "device_count")) g_device_count_override = atoi(value);
    else return 0;
    return 1;
}

/* Returns NVML_SUCCESS or NVML_ERROR_UNKNOWN (bad or missing config). */
static nvmlReturn_t load_config(void) {
    g_count = 0;
    g_init_result = NVML_SUCCESS;
    g_device_count_override = -1;
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path || !*path) {
        warnf("FAKE_NVML_CONFIG is not set");
        return NVML_ERROR_UNKNOWN;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        warnf("cannot open %s", path);
        return NVML_ERROR_UNKNOWN;
    }
    char line[1024];
    int lineno = 0;
    device_t *cur = NULL;
    nvmlReturn_t result = NVML_SUCCESS;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        if (!strcmp(s, "[device]")) {
            if (g_count >= MAX_DEVICES) {
                warnf("%s:%d: too many devices", path, lineno);
                result = NVML_ERROR_UNKNOWN;
                break;
            }
            cur = &g_devices[g_count];
            device_defaults(cur, g_count);
            g_count++;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            warnf("%s:%d: expected 'key = value'", path, lineno);
            result = NVML_ERROR_UNKNOWN;
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        char *value = trim(eq + 1);
        int ok = cur ? set_device_key(cur, key, value) : set_host_key(key, value);
        if (!ok) {
            warnf("%s:%d: bad key or value '%s'", path, lineno, key);
            result = NVML_ERROR_UNKNOWN;
            break;
        }
    }
    fclose(f);
    return result;
}

/* ---- helpers used by every device call --------------------------------- */

static device_t *as_device(void *handle) {
    device_t *d = (device_t *)handle;
    if (d < g_devices || d >= g_devices + g_count) return NULL;
    return d;
}

/* Decide the outcome of calling `field` on device `d`. */
static nvmlReturn_t check(device_t *d, int field) {
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    if (d->lost_field == field) {
        d->lost = 1;
        return NVML_ERROR_GPU_IS_LOST;
    }
    return d->fail[field];
}

#define DEVICE_CALL(fname, handle, field)            \
    trace(fname);                                    \
    device_t *d = as_device(handle);                 \
    nvmlReturn_t rc_ = check(d, field);              \
    if (rc_ != NVML_SUCCESS) return rc_;

static void fill_pci(nvmlPciInfo_t *pci, const char *bus_id, unsigned int devid, unsigned int subsys) {
    memset(pci, 0, sizeof *pci);
    parse_bus_id(bus_id, &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = devid;
    pci->pciSubSystemId = subsys;
    snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain & 0xFFFF, pci->bus,
             pci->device);
}

static int copy_out(char *buf, unsigned int len, const char *value) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ---- init / shutdown / system ------------------------------------------ */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    trace("nvmlInitWithFlags");
    if (g_init_refcount == 0) {
        nvmlReturn_t rc = load_config();
        if (rc != NVML_SUCCESS) return rc;
        if (g_init_result != NVML_SUCCESS) return g_init_result;
    }
    g_init_refcount++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { trace("nvmlInit_v2"); return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { trace("nvmlInit"); return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    trace("nvmlShutdown");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    g_init_refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    trace("nvmlSystemGetDriverVersion");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, g_driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    trace("nvmlSystemGetNVMLVersion");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, g_nvml_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    trace("nvmlSystemGetCudaDriverVersion");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = g_cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    trace("nvmlSystemGetCudaDriverVersion_v2");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = g_cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    trace("nvmlDeviceGetCount_v2");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)(g_device_count_override >= 0 ? g_device_count_override : g_count);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    trace("nvmlDeviceGetHandleByIndex_v2");
    if (g_init_refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)g_count) return NVML_ERROR_INVALID_ARGUMENT;
    device_t *d = &g_devices[index];
    nvmlReturn_t rc = check(d, F_HANDLE);
    if (rc != NVML_SUCCESS) return rc;
    *device = d;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* ---- per-device queries ------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetName", handle, F_NAME);
    return copy_out(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetUUID", handle, F_UUID);
    return copy_out(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *handle, nvmlPciInfo_t *pci) {
    DEVICE_CALL("nvmlDeviceGetPciInfo_v3", handle, F_PCI);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, d->bus_id, d->pci_device_id, d->pci_subsystem_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *mem) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo", handle, F_MEM);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = d->mem_total;
    mem->free = d->mem_free;
    /* v1 "used" includes the driver's reservation, as the real library does */
    mem->used = d->mem_used + d->mem_reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *handle, nvmlMemory_v2_t *mem) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo_v2", handle, F_MEM_V2);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    if (mem->version != NVML_MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    mem->total = d->mem_total;
    mem->reserved = d->mem_reserved;
    mem->free = d->mem_free;
    mem->used = d->mem_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    DEVICE_CALL("nvmlDeviceGetCudaComputeCapability", handle, F_CC);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(void *handle, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL("nvmlDeviceGetEccMode", handle, F_ECC_MODE);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = d->ecc_current;
    *pending = d->ecc_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *handle, unsigned int errorType, unsigned int counterType,
                                         unsigned long long *count) {
    DEVICE_CALL("nvmlDeviceGetTotalEccErrors", handle, F_ECC_ERR);
    if (!count || errorType > 1 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    /* the fake keeps volatile counts only; aggregate reports the same numbers */
    *count = errorType == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *handle, unsigned int *mw) {
    DEVICE_CALL("nvmlDeviceGetPowerUsage", handle, F_POWER);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *handle, unsigned int *mw) {
    DEVICE_CALL("nvmlDeviceGetEnforcedPowerLimit", handle, F_POWER_LIMIT);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *handle, unsigned int *mw) {
    DEVICE_CALL("nvmlDeviceGetPowerManagementLimit", handle, F_POWER_MGMT_LIMIT);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_mgmt_limit_mw ? d->power_mgmt_limit_mw : d->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(void *handle, unsigned int sensor, unsigned int *temp) {
    DEVICE_CALL("nvmlDeviceGetTemperature", handle, F_TEMP);
    if (!temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temperature;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(void *handle, unsigned int type, unsigned int *clock) {
    DEVICE_CALL("nvmlDeviceGetClockInfo", handle, F_CLOCK);
    if (!clock || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = d->clocks[type];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *handle, unsigned int type, unsigned int *clock) {
    DEVICE_CALL("nvmlDeviceGetMaxClockInfo", handle, F_MAX_CLOCK);
    if (!clock || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = d->max_clocks[type];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void *handle, unsigned int *v) {
    DEVICE_CALL("nvmlDeviceGetCurrPcieLinkGeneration", handle, F_PCIE_GEN);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = d->pcie_gen;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(void *handle, unsigned int *v) {
    DEVICE_CALL("nvmlDeviceGetMaxPcieLinkGeneration", handle, F_PCIE_GEN_MAX);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = d->pcie_gen_max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(void *handle, unsigned int *v) {
    DEVICE_CALL("nvmlDeviceGetCurrPcieLinkWidth", handle, F_PCIE_WIDTH);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = d->pcie_width;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(void *handle, unsigned int *v) {
    DEVICE_CALL("nvmlDeviceGetMaxPcieLinkWidth", handle, F_PCIE_WIDTH_MAX);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = d->pcie_width_max;
    return NVML_SUCCESS;
}

/* Like the real library: no NVLink at all -> NOT_SUPPORTED; a link number
 * past the device's links -> INVALID_ARGUMENT. */
static nvmlReturn_t link_check(device_t *d, unsigned int link) {
    if (d->nvlink_count <= 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)d->nvlink_count || link >= MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(void *handle, unsigned int link, unsigned int *isActive) {
    DEVICE_CALL("nvmlDeviceGetNvLinkState", handle, F_NVLINK_STATE);
    nvmlReturn_t rc = link_check(d, link);
    if (rc != NVML_SUCCESS) return rc;
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = d->links[link].present && d->links[link].up;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *handle, unsigned int link, nvmlPciInfo_t *pci) {
    DEVICE_CALL("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, F_NVLINK_REMOTE);
    nvmlReturn_t rc = link_check(d, link);
    if (rc != NVML_SUCCESS) return rc;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->links[link].present) return NVML_ERROR_NOT_FOUND;
    fill_pci(pci, d->links[link].remote_bus_id, 0, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void *handle, unsigned int link, unsigned int *type) {
    DEVICE_CALL("nvmlDeviceGetNvLinkRemoteDeviceType", handle, F_NVLINK_REMOTE_TYPE);
    nvmlReturn_t rc = link_check(d, link);
    if (rc != NVML_SUCCESS) return rc;
    if (!type) return NVML_ERROR_INVALID_ARGUMENT;
    *type = d->links[link].present ? d->links[link].remote_type : 0xFF;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(void *handle, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL("nvmlDeviceGetMigMode", handle, F_MIG);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = d->mig_current;
    *pending = d->mig_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *handle, nvmlUtilization_t *util) {
    DEVICE_CALL("nvmlDeviceGetUtilizationRates", handle, F_UTIL);
    if (!util) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = d->util_gpu;
    util->memory = d->util_mem;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned int *count, nvmlProcessInfo_t *infos) {
    DEVICE_CALL("nvmlDeviceGetComputeRunningProcesses_v3", handle, F_PROCS);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nprocs == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < (unsigned int)d->nprocs) {
        *count = (unsigned int)d->nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, d->procs, sizeof(nvmlProcessInfo_t) * (size_t)d->nprocs);
    *count = (unsigned int)d->nprocs;
    return NVML_SUCCESS;
}

/* Are a and b joined by NVLink, directly or both through NVSwitches? */
static int nvlink_connected(device_t *a, device_t *b) {
    int a_switch = 0, b_switch = 0;
    for (int i = 0; i < a->nvlink_count && i < MAX_LINKS; i++) {
        link_t *l = &a->links[i];
        if (!l->present || !l->up) continue;
        if (l->remote_type == 2) a_switch = 1;
        else if (!strcasecmp(l->remote_bus_id, b->bus_id)) return 1;
    }
    for (int i = 0; i < b->nvlink_count && i < MAX_LINKS; i++) {
        link_t *l = &b->links[i];
        if (l->present && l->up && l->remote_type == 2) b_switch = 1;
    }
    return a_switch && b_switch;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(void *h1, void *h2, unsigned int index, unsigned int *status) {
    trace("nvmlDeviceGetP2PStatus");
    device_t *a = as_device(h1), *b = as_device(h2);
    nvmlReturn_t rc = check(a, F_P2P);
    if (rc == NVML_SUCCESS) rc = check(b, F_P2P);
    if (rc != NVML_SUCCESS) return rc;
    if (!status || index > 5) return NVML_ERROR_INVALID_ARGUMENT;
    if (a == b) {
        *status = 0;
        return NVML_SUCCESS;
    }
    if (index == 2) /* NVML_P2P_CAPS_INDEX_NVLINK */
        *status = nvlink_connected(a, b) ? 0 : 5; /* OK : NOT_SUPPORTED */
    else
        *status = g_p2p_read;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *h1, void *h2, unsigned int *level) {
    trace("nvmlDeviceGetTopologyCommonAncestor");
    device_t *a = as_device(h1), *b = as_device(h2);
    nvmlReturn_t rc = check(a, F_TOPO);
    if (rc == NVML_SUCCESS) rc = check(b, F_TOPO);
    if (rc != NVML_SUCCESS) return rc;
    if (!level) return NVML_ERROR_INVALID_ARGUMENT;
    *level = a == b ? 0 : g_topology_level;
    return NVML_SUCCESS;
}

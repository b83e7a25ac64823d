/*
 * A stand-in for libnvidia-ml.so.1, so tests run the real pynvml bindings without a GPU.
 *
 * It exports the NVML symbols that collector/nvml.py reaches through pynvml (same names,
 * same argument lists and struct layouts as pynvml's ctypes declarations), and serves the
 * devices described by a text file named in the environment variable NVML_STUB_CONFIG.
 * The file is read at nvmlInit (nvmlInitWithFlags / nvmlInit_v2) and again whenever the
 * test calls the extra symbol nvmlStubReload(), so values can change between polls.
 *
 * Config format: one "key value..." per line, '#' starts a comment. Keys before the first
 * "device" line are global; "device" starts a physical GPU; "mig" starts a MIG device of
 * the last physical GPU (the keys after it apply to that MIG device).
 *
 *   global:  init <rc>  driver <str>  cuda <int>  error <symbol> <rc>
 *   device:  name <str>  uuid <str>  pci <bus id>  serial <str>  cc <major> <minor>
 *            mem <total> <used> [reserved]  util <gpu%> <mem%>  power_mw <n>  energy_mj <n>
 *            temp <c>  sm_clock <mhz>  clock_reasons <mask>  ecc_dbe <n>
 *            remapped <correctable> <uncorrectable> <pending> <failure>
 *            mig_mode <current> <pending>  max_mig <n>
 *            profile <id> <slices> <memory MiB> <name>     (GPU-instance profile table)
 *            proc <pid> <used bytes>  procutil <pid> <sm%> <mem%>  xid <n>  lost 1
 *            error <symbol> <rc>                             (that call fails on this device)
 *   mig:     uuid gi ci slices mem_mb mem proc error lost    (as above)
 *
 * Without NVML_STUB_CONFIG (or with an unreadable file), nvmlInit fails with
 * LIBRARY_NOT_FOUND, as on a machine without NVML: a test process that keeps the stand-in
 * loaded after the NVML tests does not show later code a fake, empty GPU node.
 *
 * Error codes are NVML's: 3 NOT_SUPPORTED, 4 NO_PERMISSION, 9 DRIVER_NOT_LOADED,
 * 13 FUNCTION_NOT_FOUND, 15 GPU_IS_LOST, ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef int nvmlReturn_t;
typedef unsigned long long u64;

enum {
    OK = 0, ERR_UNINITIALIZED = 1, ERR_INVALID_ARGUMENT = 2, ERR_NOT_SUPPORTED = 3,
    ERR_NOT_FOUND = 6, ERR_INSUFFICIENT_SIZE = 7, ERR_TIMEOUT = 10, ERR_GPU_IS_LOST = 15,
    ERR_ARGUMENT_VERSION_MISMATCH = 25, ERR_UNKNOWN = 999
};

#define MAX_DEVICES 16
#define MAX_MIGS 8
#define MAX_PROCS 16
#define MAX_ERRORS 16
#define MAX_PROFILES 16
#define MAX_XIDS 32
#define MAX_SETS 8
#define XID_EVENT 0x8ULL
#define NO_INSTANCE 0xFFFFFFFFu

typedef struct { char symbol[64]; int rc; } injected_t;
typedef struct { unsigned pid; u64 used; } proc_t;
typedef struct { unsigned pid; unsigned sm, mem; u64 ts; } procutil_t;
typedef struct { unsigned id, slices; u64 mem_mb; char name[96]; } profile_t;

typedef struct device {
    struct device *parent;  /* NULL for a physical GPU, else the MIG device's GPU */
    int is_mig, lost, index;
    char name[96], uuid[96], pci[32], serial[30];
    int cc_major, cc_minor;
    u64 mem_total, mem_used, mem_reserved;
    unsigned util_gpu, util_mem, power_mw, temp, sm_clock;
    u64 energy_mj, clock_reasons, ecc_dbe;
    unsigned remap[4];
    unsigned mig_current, mig_pending, max_mig;
    unsigned gi, ci, slices;
    u64 mem_mb;
    int nprocs, nprocutil, nerrors, nprofiles, nmigs;
    proc_t procs[MAX_PROCS];
    procutil_t procutil[MAX_PROCS];
    injected_t errors[MAX_ERRORS];
    profile_t profiles[MAX_PROFILES];
    struct device *migs[MAX_MIGS];
} device_t;

typedef struct { device_t *dev; u64 xid; } xid_t;
typedef struct { int used; u64 mask[MAX_DEVICES]; } eventset_t;

static device_t devices[MAX_DEVICES];
static device_t migs[MAX_DEVICES * MAX_MIGS];
static int ndevices, nmigs_total, init_rc, nglobal_errors, nxids, initialized;
static char driver[80] = "550.54.15";
static int cuda_version = 12040;
static injected_t global_errors[MAX_ERRORS];
static xid_t xids[MAX_XIDS];
static eventset_t sets[MAX_SETS];

static u64 now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (u64)tv.tv_sec * 1000000ULL + (u64)tv.tv_usec;
}

/* Copy a string into a fixed field, cutting it at the field's size (as NVML's would be). */
static void copy(char *dst, size_t size, const char *src) {
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void add_error(injected_t *list, int *n, const char *args) {
    if (*n >= MAX_ERRORS) return;
    if (sscanf(args, "%63s %d", list[*n].symbol, &list[*n].rc) == 2) (*n)++;
}

/* One config line for the current device (a physical GPU or a MIG device). */
static void device_key(device_t *d, const char *key, const char *v) {
    if (!strcmp(key, "name")) copy(d->name, sizeof d->name, v);
    else if (!strcmp(key, "uuid")) copy(d->uuid, sizeof d->uuid, v);
    else if (!strcmp(key, "pci")) copy(d->pci, sizeof d->pci, v);
    else if (!strcmp(key, "serial")) copy(d->serial, sizeof d->serial, v);
    else if (!strcmp(key, "cc")) sscanf(v, "%d %d", &d->cc_major, &d->cc_minor);
    else if (!strcmp(key, "mem"))
        sscanf(v, "%llu %llu %llu", &d->mem_total, &d->mem_used, &d->mem_reserved);
    else if (!strcmp(key, "util")) sscanf(v, "%u %u", &d->util_gpu, &d->util_mem);
    else if (!strcmp(key, "power_mw")) d->power_mw = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "energy_mj")) d->energy_mj = strtoull(v, NULL, 10);
    else if (!strcmp(key, "temp")) d->temp = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "sm_clock")) d->sm_clock = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "clock_reasons")) d->clock_reasons = strtoull(v, NULL, 0);
    else if (!strcmp(key, "ecc_dbe")) d->ecc_dbe = strtoull(v, NULL, 10);
    else if (!strcmp(key, "remapped"))
        sscanf(v, "%u %u %u %u", &d->remap[0], &d->remap[1], &d->remap[2], &d->remap[3]);
    else if (!strcmp(key, "mig_mode")) sscanf(v, "%u %u", &d->mig_current, &d->mig_pending);
    else if (!strcmp(key, "max_mig")) d->max_mig = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "gi")) d->gi = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "ci")) d->ci = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "slices")) d->slices = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(key, "mem_mb")) d->mem_mb = strtoull(v, NULL, 10);
    else if (!strcmp(key, "lost")) d->lost = atoi(v);
    else if (!strcmp(key, "error")) add_error(d->errors, &d->nerrors, v);
    else if (!strcmp(key, "proc") && d->nprocs < MAX_PROCS) {
        proc_t *p = &d->procs[d->nprocs];
        if (sscanf(v, "%u %llu", &p->pid, &p->used) == 2) d->nprocs++;
    } else if (!strcmp(key, "procutil") && d->nprocutil < MAX_PROCS) {
        procutil_t *p = &d->procutil[d->nprocutil];
        if (sscanf(v, "%u %u %u", &p->pid, &p->sm, &p->mem) == 3) {
            p->ts = now_us() + (u64)d->nprocutil;
            d->nprocutil++;
        }
    } else if (!strcmp(key, "profile") && d->nprofiles < MAX_PROFILES) {
        profile_t *p = &d->profiles[d->nprofiles];
        int used = 0;
        if (sscanf(v, "%u %u %llu %n", &p->id, &p->slices, &p->mem_mb, &used) == 3) {
            copy(p->name, sizeof p->name, v + used);
            d->nprofiles++;
        }
    } else if (!strcmp(key, "xid") && nxids < MAX_XIDS) {
        xids[nxids].dev = d;
        xids[nxids].xid = strtoull(v, NULL, 10);
        nxids++;
    }
}

static void load_config(void) {
    memset(devices, 0, sizeof devices);
    memset(migs, 0, sizeof migs);
    ndevices = nmigs_total = init_rc = nglobal_errors = nxids = 0;
    const char *path = getenv("NVML_STUB_CONFIG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) {
        init_rc = 12;  /* NVML_ERROR_LIBRARY_NOT_FOUND: no stand-in configured */
        return;
    }
    char line[512];
    device_t *current = NULL;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        line[strcspn(line, "\r\n")] = '\0';
        char key[32];
        int used = 0;
        if (sscanf(line, " %31s %n", key, &used) < 1) continue;
        const char *value = line + used;
        size_t len = strlen(value);
        while (len && (value[len - 1] == ' ' || value[len - 1] == '\t')) len--;
        char v[480];
        snprintf(v, sizeof v, "%.*s", (int)len, value);
        if (!strcmp(key, "device") && ndevices < MAX_DEVICES) {
            current = &devices[ndevices];
            current->index = ndevices++;
            current->max_mig = 7;
        } else if (!strcmp(key, "mig") && current && nmigs_total < MAX_DEVICES * MAX_MIGS) {
            device_t *gpu = current->parent ? current->parent : current;
            if (gpu->nmigs >= MAX_MIGS) continue;
            device_t *m = &migs[nmigs_total++];
            m->parent = gpu;
            m->is_mig = 1;
            m->index = gpu->index;
            gpu->migs[gpu->nmigs++] = m;
            current = m;
        } else if (current) {
            device_key(current, key, v);
        } else if (!strcmp(key, "init")) {
            init_rc = atoi(v);
        } else if (!strcmp(key, "driver")) {
            copy(driver, sizeof driver, v);
        } else if (!strcmp(key, "cuda")) {
            cuda_version = atoi(v);
        } else if (!strcmp(key, "error")) {
            add_error(global_errors, &nglobal_errors, v);
        }
    }
    fclose(f);
}

static int lookup(const injected_t *list, int n, const char *symbol) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].symbol, symbol)) return list[i].rc;
    return OK;
}

/* The return code a call gets before it does anything: not initialised, injected errors. */
static int check(const char *symbol, const device_t *d) {
    if (!initialized) return ERR_UNINITIALIZED;
    int rc;
    if (d) {
        if (d->lost || (d->parent && d->parent->lost)) return ERR_GPU_IS_LOST;
        if ((rc = lookup(d->errors, d->nerrors, symbol))) return rc;
    }
    return lookup(global_errors, nglobal_errors, symbol);
}

#define CHECK(dev) do { int rc_ = check(__func__, (dev)); if (rc_) return rc_; } while (0)
#define NEED(ptr) do { if (!(ptr)) return ERR_INVALID_ARGUMENT; } while (0)

static int put_string(char *out, unsigned length, const char *value) {
    NEED(out);
    if (strlen(value) + 1 > length) return ERR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return OK;
}

/* ---- life cycle --------------------------------------------------------------------- */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    load_config();
    int rc = lookup(global_errors, nglobal_errors, "nvmlInitWithFlags");
    if (init_rc || rc) return init_rc ? init_rc : rc;
    initialized++;
    return OK;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return ERR_UNINITIALIZED;
    initialized--;
    return OK;
}

/* Test-only: re-read the config file (values, errors, queued Xids) without a re-init. */
int nvmlStubReload(void) {
    load_config();
    return ndevices;
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------------------- */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    CHECK(NULL);
    return put_string(version, length, driver);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    CHECK(NULL); NEED(version);
    *version = cuda_version;
    return OK;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    CHECK(NULL); NEED(version);
    *version = cuda_version;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    CHECK(NULL); NEED(count);
    *count = (unsigned)ndevices;
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, device_t **device) {
    CHECK(NULL); NEED(device);
    if (index >= (unsigned)ndevices) return ERR_INVALID_ARGUMENT;
    if (devices[index].lost) return ERR_GPU_IS_LOST;
    *device = &devices[index];
    return OK;
}

/* ---- identity ----------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetName(device_t *d, char *name, unsigned int length) {
    CHECK(d); NEED(d);
    return put_string(name, length, d->is_mig ? d->parent->name : d->name);
}

nvmlReturn_t nvmlDeviceGetUUID(device_t *d, char *uuid, unsigned int length) {
    CHECK(d); NEED(d);
    return put_string(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetIndex(device_t *d, unsigned int *index) {
    CHECK(d); NEED(d); NEED(index);
    *index = (unsigned)d->index;
    return OK;
}

nvmlReturn_t nvmlDeviceGetSerial(device_t *d, char *serial, unsigned int length) {
    CHECK(d); NEED(d);
    return put_string(serial, length, d->is_mig ? d->parent->serial : d->serial);
}

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(device_t *d, pci_info_t *pci) {
    CHECK(d); NEED(d); NEED(pci);
    const device_t *g = d->is_mig ? d->parent : d;
    memset(pci, 0, sizeof *pci);
    copy(pci->busId, sizeof pci->busId, g->pci);
    copy(pci->busIdLegacy, sizeof pci->busIdLegacy, g->pci + (strlen(g->pci) > 12 ? 4 : 0));
    sscanf(g->pci, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x233010DE;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(device_t *d, int *major, int *minor) {
    CHECK(d); NEED(d); NEED(major); NEED(minor);
    const device_t *g = d->is_mig ? d->parent : d;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return OK;
}

/* ---- memory ------------------------------------------------------------------------- */
typedef struct { u64 total, free, used; } memory_t;
typedef struct { unsigned int version; u64 total, reserved, free, used; } memory_v2_t;
#define MEMORY_V2 0x02000028u

nvmlReturn_t nvmlDeviceGetMemoryInfo(device_t *d, memory_t *m) {
    CHECK(d); NEED(d); NEED(m);
    m->total = d->mem_total;
    m->used = d->mem_used + d->mem_reserved;  /* v1 counts the reserved memory as used */
    m->free = d->mem_total - m->used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(device_t *d, memory_v2_t *m) {
    CHECK(d); NEED(d); NEED(m);
    if (m->version != MEMORY_V2) return ERR_ARGUMENT_VERSION_MISMATCH;
    m->total = d->mem_total;
    m->reserved = d->mem_reserved;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used - d->mem_reserved;
    return OK;
}

/* ---- MIG ---------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMigMode(device_t *d, unsigned int *current, unsigned int *pending) {
    CHECK(d); NEED(d); NEED(current); NEED(pending);
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    *current = d->mig_current;
    *pending = d->mig_pending;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(device_t *d, unsigned int *count) {
    CHECK(d); NEED(d); NEED(count);
    *count = d->is_mig ? 0 : d->max_mig;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(device_t *d, unsigned int index,
                                                 device_t **mig) {
    CHECK(d); NEED(d); NEED(mig);
    if (d->is_mig || !d->mig_current) return ERR_INVALID_ARGUMENT;
    if (index >= (unsigned)d->nmigs) return ERR_NOT_FOUND;
    *mig = d->migs[index];
    if ((*mig)->lost) return ERR_GPU_IS_LOST;
    return OK;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(device_t *d, unsigned int *is_mig) {
    CHECK(d); NEED(d); NEED(is_mig);
    *is_mig = (unsigned)d->is_mig;
    return OK;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(device_t *d, unsigned int *id) {
    CHECK(d); NEED(d); NEED(id);
    if (!d->is_mig) return ERR_INVALID_ARGUMENT;
    *id = d->gi;
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(device_t *d, unsigned int *id) {
    CHECK(d); NEED(d); NEED(id);
    if (!d->is_mig) return ERR_INVALID_ARGUMENT;
    *id = d->ci;
    return OK;
}

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    u64 memorySizeMB;
} attributes_t;

nvmlReturn_t nvmlDeviceGetAttributes_v2(device_t *d, attributes_t *a) {
    CHECK(d); NEED(d); NEED(a);
    memset(a, 0, sizeof *a);
    a->gpuInstanceSliceCount = d->is_mig ? d->slices : 7;
    a->computeInstanceSliceCount = a->gpuInstanceSliceCount;
    a->multiprocessorCount = 14 * a->gpuInstanceSliceCount;
    a->memorySizeMB = d->is_mig ? d->mem_mb : d->mem_total >> 20;
    return OK;
}

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    u64 memorySizeMB;
    char name[96];
} profile_info_v2_t;
#define PROFILE_INFO_V2 0x02000098u

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(device_t *d, unsigned int profile,
                                                  profile_info_v2_t *info) {
    CHECK(d); NEED(d); NEED(info);
    if (info->version != PROFILE_INFO_V2) return ERR_ARGUMENT_VERSION_MISMATCH;
    for (int i = 0; i < d->nprofiles; i++) {
        const profile_t *p = &d->profiles[i];
        if (p->id != profile) continue;
        info->id = p->id;
        info->sliceCount = p->slices;
        info->instanceCount = 7 / (p->slices ? p->slices : 1);
        info->multiprocessorCount = 14 * p->slices;
        info->memorySizeMB = p->mem_mb;
        copy(info->name, sizeof info->name, p->name);
        return OK;
    }
    return ERR_NOT_SUPPORTED;
}

/* ---- telemetry ---------------------------------------------------------------------- */
typedef struct { unsigned int gpu, memory; } utilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(device_t *d, utilization_t *u) {
    CHECK(d); NEED(d); NEED(u);
    if (d->is_mig || d->mig_current) return ERR_NOT_SUPPORTED;  /* as on real MIG GPUs */
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(device_t *d, unsigned int *mw) {
    CHECK(d); NEED(d); NEED(mw);
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    *mw = d->power_mw;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(device_t *d, u64 *mj) {
    CHECK(d); NEED(d); NEED(mj);
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    *mj = d->energy_mj;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(device_t *d, int sensor, unsigned int *celsius) {
    CHECK(d); NEED(d); NEED(celsius);
    if (sensor != 0 || d->is_mig) return ERR_NOT_SUPPORTED;
    *celsius = d->temp;
    return OK;
}

nvmlReturn_t nvmlDeviceGetClockInfo(device_t *d, int type, unsigned int *mhz) {
    CHECK(d); NEED(d); NEED(mhz);
    if (type != 1 || d->is_mig) return ERR_NOT_SUPPORTED;  /* only NVML_CLOCK_SM here */
    *mhz = d->sm_clock;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(device_t *d, u64 *reasons) {
    CHECK(d); NEED(d); NEED(reasons);
    *reasons = d->clock_reasons;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(device_t *d, u64 *reasons) {
    CHECK(d); NEED(d); NEED(reasons);
    *reasons = d->clock_reasons;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(device_t *d, int error_type, int counter_type,
                                         u64 *count) {
    CHECK(d); NEED(d); NEED(count);
    if (error_type != 1 || counter_type != 0) return ERR_NOT_SUPPORTED;  /* volatile DBE */
    *count = d->ecc_dbe;
    return OK;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(device_t *d, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    CHECK(d); NEED(d); NEED(corr); NEED(unc); NEED(pending); NEED(failure);
    *corr = d->remap[0];
    *unc = d->remap[1];
    *pending = d->remap[2];
    *failure = d->remap[3];
    return OK;
}

/* ---- processes ---------------------------------------------------------------------- */
typedef struct { unsigned int pid; u64 usedGpuMemory; unsigned int gpuInstanceId,
                 computeInstanceId; } process_info_t;

static nvmlReturn_t processes(device_t *d, unsigned int *count, process_info_t *out) {
    NEED(d); NEED(count);
    if (*count < (unsigned)d->nprocs || (!out && d->nprocs)) {
        *count = (unsigned)d->nprocs;
        return d->nprocs ? ERR_INSUFFICIENT_SIZE : OK;
    }
    for (int i = 0; i < d->nprocs && out; i++) {
        out[i].pid = d->procs[i].pid;
        out[i].usedGpuMemory = d->procs[i].used;
        out[i].gpuInstanceId = d->is_mig ? d->gi : NO_INSTANCE;
        out[i].computeInstanceId = d->is_mig ? d->ci : NO_INSTANCE;
    }
    *count = (unsigned)d->nprocs;
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(device_t *d, unsigned int *count,
                                                     process_info_t *out) {
    CHECK(d);
    return processes(d, count, out);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(device_t *d, unsigned int *count,
                                                     process_info_t *out) {
    CHECK(d);
    return processes(d, count, out);
}

typedef struct { unsigned int pid; u64 timeStamp; unsigned int smUtil, memUtil, encUtil,
                 decUtil; } process_sample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(device_t *d, process_sample_t *out,
                                             unsigned int *count, u64 last_seen) {
    CHECK(d); NEED(d); NEED(count);
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    unsigned n = 0;
    for (int i = 0; i < d->nprocutil; i++)
        if (d->procutil[i].ts > last_seen) n++;
    if (!n) return ERR_NOT_FOUND;  /* no samples since last_seen */
    if (!out || *count < n) {
        *count = n;
        return ERR_INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (int i = 0; i < d->nprocutil; i++) {
        const procutil_t *p = &d->procutil[i];
        if (p->ts <= last_seen) continue;
        memset(&out[k], 0, sizeof out[k]);
        out[k].pid = p->pid;
        out[k].timeStamp = p->ts;
        out[k].smUtil = p->sm;
        out[k].memUtil = p->mem;
        k++;
    }
    *count = k;
    return OK;
}

/* ---- events ------------------------------------------------------------------------- */
typedef struct { device_t *device; u64 eventType, eventData; unsigned int gpuInstanceId,
                 computeInstanceId; } event_data_t;

nvmlReturn_t nvmlEventSetCreate(eventset_t **set) {
    CHECK(NULL); NEED(set);
    for (int i = 0; i < MAX_SETS; i++) {
        if (sets[i].used) continue;
        memset(&sets[i], 0, sizeof sets[i]);
        sets[i].used = 1;
        *set = &sets[i];
        return OK;
    }
    return ERR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(device_t *d, u64 *types) {
    CHECK(d); NEED(d); NEED(types);
    *types = XID_EVENT;
    return OK;
}

nvmlReturn_t nvmlDeviceRegisterEvents(device_t *d, u64 types, eventset_t *set) {
    CHECK(d); NEED(d); NEED(set);
    if (d->is_mig) return ERR_NOT_SUPPORTED;
    if (types & ~XID_EVENT) return ERR_NOT_SUPPORTED;
    set->mask[d->index] |= types;
    return OK;
}

nvmlReturn_t nvmlEventSetWait_v2(eventset_t *set, event_data_t *data, unsigned int timeout) {
    (void)timeout;  /* never blocks: a queued Xid is returned at once, else a timeout */
    CHECK(NULL); NEED(set); NEED(data);
    for (int i = 0; i < nxids; i++) {
        device_t *gpu = xids[i].dev->is_mig ? xids[i].dev->parent : xids[i].dev;
        if (!(set->mask[gpu->index] & XID_EVENT)) continue;
        data->device = gpu;
        data->eventType = XID_EVENT;
        data->eventData = xids[i].xid;
        data->gpuInstanceId = xids[i].dev->is_mig ? xids[i].dev->gi : NO_INSTANCE;
        data->computeInstanceId = xids[i].dev->is_mig ? xids[i].dev->ci : NO_INSTANCE;
        memmove(&xids[i], &xids[i + 1], (size_t)(nxids - i - 1) * sizeof xids[0]);
        nxids--;
        return OK;
    }
    return ERR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(eventset_t *set) {
    CHECK(NULL); NEED(set);
    set->used = 0;
    return OK;
}

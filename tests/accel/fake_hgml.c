/*
 * Simulated T-Head HGML v2 (libhgml.so): the NVML fake under the hgml* names
 * (hgmlInit_v2, hgmlDeviceGetCount_v2, hgmlDeviceGetHandleByIndex_v2, hgmlDeviceGetUUID,
 * hgmlDeviceGetPciInfo_v2, hgmlDeviceGetComputeRunningProcesses_v3/_v2, hgmlErrorString,
 * hgmlShutdown, hgmlDeviceGetNumaNodeId, hgmlDeviceGetMinorNumber).
 */
#define FAKE_HGML 1
#include "fake_nvml.c"

/*
 * The DCMI fake (tests/accel/fake_dcmi.c) reading its state file from the environment
 * variable XLURM_FAKE_DCMI_STATE instead of XLURM_FAKE_GPU_STATE, so that one xlurmd can
 * load it next to the NVML fake and give it a device list of its own (both fakes would
 * otherwise read the same file and report the same devices).
 *
 * tests/vm/run builds it, like every tests/vm/fakes/*.c, with -I tests/accel into the
 * share's fakes/ folder: $XLURM_VM_SRC/fakes/libfake_dcmi_state_env.so in the guest.
 */
#include <stdlib.h>
#define FAKE_STATE_PATH getenv("XLURM_FAKE_DCMI_STATE")
#include "fake_dcmi.c"

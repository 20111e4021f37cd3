/* wheel_tier.c - prints what the libcism it is linked to was built with and
 * the kernel tier it picks on this CPU (tests/platforms/check_wheels.sh runs
 * it against the wheels' libraries, natively and under qemu). */
#include <stdio.h>

#include "cism.h"

int main(void) {
    printf("build: %s\nsystem: %s\n", cism_build_info(), cism_system_info());
    return 0;
}

/*
 * have_rdma_device(): whether this machine has an RDMA device, for the
 * programs in tools/ and the guest tests (which exit 77, "skipped", without
 * one). It looks in sysfs, not through verbs or the library: nothing may
 * open the device before a program forks its ranks or creates its context.
 */
#ifndef SHS_TOOLS_RDMA_DEVICE_H
#define SHS_TOOLS_RDMA_DEVICE_H

#include <dirent.h>
#include <stdbool.h>

static inline bool have_rdma_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    bool found = false;
    if (d == NULL)
        return false;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            found = true;
    closedir(d);
    return found;
}

#endif

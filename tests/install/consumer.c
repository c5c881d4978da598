/* A trainer-shaped consumer of the installed library. */
#include <stdio.h>
#include <string.h>

#include <shadowsync/shadowsync.h>

int main(void)
{
    if (strcmp(shs_version(), SHS_VERSION_STRING) != 0) {
        fprintf(stderr, "header %s but library %s\n", SHS_VERSION_STRING, shs_version());
        return 1;
    }
    printf("consumer: shadowsync %s (%s)\n", shs_version(), shs_status_string(SHS_OK));
    return 0;
}

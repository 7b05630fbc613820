/* replay.c — main() for the ordinary build of a harness: feed every file of the
 * committed seed corpus tests/fuzz/corpus/NAME (NAME from the program's name,
 * test_fuzz_NAME) through LLVMFuzzerTestOneInput, so the harness's properties
 * run under `make test` without clang.  Prints "ok fuzz_NAME ..." (a failed
 * property aborts, which tests/run counts as a failure). */
#include <dirent.h>

#include "fuzz.h"

int main(int argc, char **argv)
{
    (void)argc;
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    const char *name = strncmp(base, "test_fuzz_", 10) == 0 ? base + 10 : base;
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    if (!d) {
        printf("FAIL fuzz_%s: no seed corpus at %s\n", name, dir);
        return 1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static uint8_t buf[1 << 20];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, len);
        n++;
    }
    closedir(d);
    if (n == 0) {
        printf("FAIL fuzz_%s: the seed corpus %s is empty\n", name, dir);
        return 1;
    }
    printf("ok fuzz_%s (%d seed inputs, every property held)\n", name, n);
    return 0;
}

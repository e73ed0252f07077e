/*
 * test_install.c - `cmake --install` lays out what users and packagers
 * expect, and a program builds against the installed library with
 * pkg-config alone.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char prefix[] = "/tmp/ringd-install-XXXXXX";

static void run_or_fail(const char *cmd)
{
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "command failed (%d): %s", rc, cmd);
}

static void install_tree(void)
{
    cr_assert_not_null(mkdtemp(prefix));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmake --install '%s' --prefix '%s' >/dev/null", RINGD_BINARY_DIR,
             prefix);
    run_or_fail(cmd);
}

static void remove_tree(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", prefix);
    (void)!system(cmd);
}

TestSuite(install, .init = install_tree, .fini = remove_tree);

Test(install, puts_every_file_in_its_place)
{
    static const char *const files[] = {
        "bin/ringd",          "bin/ringctl",           "lib/libringd.so",
        "include/ringd.h",    "lib/pkgconfig/ringd.pc", "share/ringd/ringd.example.yaml",
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", prefix, files[i]);
        cr_expect_eq(stat(path, &st), 0, "missing after install: %s", files[i]);
    }
}

Test(install, runs_the_installed_binaries_and_checks_the_example_config)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/bin/ringctl' --help >/dev/null && '%s/bin/ringd' --check "
             "--config '%s/share/ringd/ringd.example.yaml' >/dev/null",
             prefix, prefix, prefix);
    run_or_fail(cmd);
}

Test(install, builds_a_client_with_pkg_config)
{
    char src[128], exe[128], cmd[4096];
    snprintf(src, sizeof src, "%s/hello.c", prefix);
    snprintf(exe, sizeof exe, "%s/hello", prefix);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs("#include <ringd.h>\n#include <stdio.h>\n#include <string.h>\n"
          "int main(void) { return strcmp(ringd_strerror(RINGD_ETIMEDOUT), "
          "\"collective timed out\") != 0; }\n",
          f);
    fclose(f);
    /* --define-prefix relocates the .pc file to where it was installed. */
    snprintf(cmd, sizeof cmd,
             "PKG_CONFIG_PATH='%s/lib/pkgconfig' cc " CLIENT_CFLAGS " -o '%s' '%s' "
             "$(PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config --define-prefix --cflags --libs "
             "ringd) && LD_LIBRARY_PATH='%s/lib' '%s'",
             prefix, exe, src, prefix, prefix, exe);
    run_or_fail(cmd);
}

/* SPDX-License-Identifier: MIT */
/* qkv_read_file, the library's whole-file reader: exact bytes (NUL bytes included), the size
 * limit on a regular file (refused unread), on a pipe and on an endless device (refused once
 * the limit is passed), standard input, and the refusals (no file, a directory); the opening
 * every reader shares (qkv_open_file): a FIFO is never waited on, and a model's files
 * (qkv_read_regular_file) are regular files only. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qkv.h"
#include "test_util.h"

static void check_message(const char *msg, const char *want)
{
    if (!strstr(msg, want)) {
        print_error("message \"%s\" lacks \"%s\"\n", msg, want);
        fail();
    }
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_regular_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/qkv-read-XXXXXX", path[64], want[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    static const char bytes[] = {'a', 'b', '\0', 'c', '\n'};
    write_bytes(path, bytes, sizeof bytes);
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(qkv_read_file(path, SIZE_MAX, &text, &len, &err), QKV_OK);
    assert_int_equal(len, sizeof bytes);
    assert_memory_equal(text, bytes, sizeof bytes);
    assert_int_equal(text[len], '\0');
    free(text);
    /* exactly the limit is read; one byte more is refused, naming the file and the limit */
    assert_int_equal(qkv_read_file(path, sizeof bytes, &text, NULL, &err), QKV_OK);
    free(text);
    assert_int_equal(qkv_read_file(path, sizeof bytes - 1, &text, &len, &err), QKV_ERR_FORMAT);
    assert_null(text);
    snprintf(want, sizeof want, "%s: more than 4 bytes", path);
    assert_string_equal(err.msg, want);
    /* an empty file is an empty string, not NULL */
    write_bytes(path, "", 0);
    assert_int_equal(qkv_read_file(path, 0, &text, &len, &err), QKV_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    free(text);
    /* a directory, and no file at all */
    assert_int_equal(qkv_read_file(dir, SIZE_MAX, &text, &len, &err), QKV_ERR_IO);
    check_message(err.msg, "is a directory");
    unlink(path);
    assert_int_equal(qkv_read_file(path, SIZE_MAX, &text, &len, &err), QKV_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot open: ", path);
    check_message(err.msg, want);
    assert_null(text);
    rmdir(dir);
    assert_int_equal(qkv_read_file(path, SIZE_MAX, NULL, &len, &err), QKV_ERR_ARG);
}

/* A file whose size stat does not know: /proc says 0 and has more. */
static void test_proc_file(void **state)
{
    (void)state;
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(qkv_read_file("/proc/self/status", SIZE_MAX, &text, &len, &err), QKV_OK);
    assert_true(len > 0 && len == strlen(text));
    assert_memory_equal(text, "Name:", 5);
    free(text);
}

/* A pipe of n bytes (byte i is i % 251) as a path, its writer a child process. */
static pid_t pipe_path(char *path, size_t cap, size_t n)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        unsigned char buf[4096];
        for (size_t done = 0; done < n;) {
            size_t k = n - done < sizeof buf ? n - done : sizeof buf;
            for (size_t i = 0; i < k; i++) buf[i] = (unsigned char)((done + i) % 251);
            ssize_t w = write(fd[1], buf, k);
            if (w <= 0) _exit(1);
            done += (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    snprintf(path, cap, "/dev/fd/%d", fd[0]);
    return pid;
}

static void test_pipe_and_endless_device(void **state)
{
    (void)state;
    enum { N = 300000 }; /* several times the first buffer: the growing path */
    char path[64];
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    pid_t pid = pipe_path(path, sizeof path, N);
    assert_int_equal(qkv_read_file(path, SIZE_MAX, &text, &len, &err), QKV_OK);
    close(atoi(path + 8));
    waitpid(pid, NULL, 0);
    assert_int_equal(len, N);
    for (size_t i = 0; i < N; i++)
        if ((unsigned char)text[i] != i % 251) fail_msg("byte %zu is %d", i, text[i]);
    free(text);

    pid = pipe_path(path, sizeof path, N);
    assert_int_equal(qkv_read_file(path, 100000, &text, &len, &err), QKV_ERR_FORMAT);
    close(atoi(path + 8));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    check_message(err.msg, "more than 100000 bytes (not a regular file");

    assert_int_equal(qkv_read_file("/dev/zero", 1000, &text, &len, &err), QKV_ERR_FORMAT);
    assert_string_equal(err.msg, "/dev/zero: more than 1000 bytes (not a regular file: it may "
                                 "never end)");
    assert_null(text);
}

static void test_stdin(void **state)
{
    (void)state;
    char dir[] = "/tmp/qkv-read-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/in", dir);
    write_bytes(path, "one\ntwo\n", 8);
    assert_non_null(freopen(path, "rb", stdin));
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(qkv_read_file(NULL, 3, &text, &len, &err), QKV_ERR_FORMAT);
    assert_string_equal(err.msg, "stdin: more than 3 bytes");
    rewind(stdin);
    assert_int_equal(qkv_read_file(NULL, 8, &text, &len, &err), QKV_OK);
    assert_string_equal(text, "one\ntwo\n");
    free(text);
    unlink(path);
    rmdir(dir);
}

/* A FIFO without a writer: every reader answers at once (a blocking open would wait for a
 * writer forever; the alarm ends a test that waits), a regular-file reader refuses any FIFO
 * and any device. A FIFO with a writer is a text like a pipe: its bytes, the first included,
 * are read whether they came before the open or after. */
static void test_fifo_and_devices(void **state)
{
    (void)state;
    alarm(120);
    char dir[] = "/tmp/qkv-read-XXXXXX", path[64], want[160];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(qkv_read_regular_file(path, 100, &text, &len, &err), QKV_ERR_IO);
    snprintf(want, sizeof want, "%s: is a FIFO or pipe, not a regular file", path);
    assert_string_equal(err.msg, want);
    assert_null(text);
    assert_null(qkv_open_file(path, 1, &err));
    assert_string_equal(err.msg, want);
    assert_int_equal(qkv_read_file(path, 100, &text, &len, &err), QKV_ERR_IO);
    check_message(err.msg, "a FIFO or pipe that no process writes to");
    assert_null(qkv_open_file(path, 0, &err));
    check_message(err.msg, "no process writes to");

    /* a writer that wrote before the open (O_RDWR: a writer that does not wait for a reader) */
    int w = open(path, O_RDWR);
    assert_true(w >= 0);
    assert_int_equal(write(w, "abc", 3), 3);
    FILE *f = qkv_open_file(path, 0, &err);
    assert_non_null(f);
    close(w);
    char buf[8] = "";
    assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
    assert_memory_equal(buf, "abc", 3);
    fclose(f);
    /* ... and one that writes after it */
    w = open(path, O_RDWR);
    assert_true(w >= 0);
    f = qkv_open_file(path, 0, &err);
    assert_non_null(f);
    assert_int_equal(write(w, "xy", 2), 2);
    close(w);
    assert_int_equal(fread(buf, 1, sizeof buf, f), 2);
    assert_memory_equal(buf, "xy", 2);
    fclose(f);

    /* devices: refused by the regular-file reader before a byte is read */
    assert_int_equal(qkv_read_regular_file("/dev/zero", SIZE_MAX, &text, &len, &err),
                     QKV_ERR_IO);
    assert_string_equal(err.msg, "/dev/zero: is a character device, not a regular file");
    assert_int_equal(qkv_read_regular_file("/dev/null", SIZE_MAX, &text, &len, &err),
                     QKV_ERR_IO);
    assert_int_equal(qkv_read_regular_file(dir, SIZE_MAX, &text, &len, &err), QKV_ERR_IO);
    check_message(err.msg, "is a directory");
    assert_int_equal(qkv_read_regular_file(NULL, 10, &text, &len, &err), QKV_ERR_ARG);
    /* a regular file reads the same through either */
    snprintf(path, sizeof path, "%s/f", dir);
    write_bytes(path, "12345", 5);
    assert_int_equal(qkv_read_regular_file(path, 5, &text, &len, &err), QKV_OK);
    assert_int_equal(len, 5);
    assert_string_equal(text, "12345");
    free(text);
    assert_int_equal(qkv_read_regular_file(path, 4, &text, &len, &err), QKV_ERR_FORMAT);
    unlink(path);
    snprintf(path, sizeof path, "%s/fifo", dir);
    unlink(path);
    rmdir(dir);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regular_file),
        cmocka_unit_test(test_proc_file),
        cmocka_unit_test(test_pipe_and_endless_device),
        cmocka_unit_test(test_stdin),
        cmocka_unit_test(test_fifo_and_devices),
    };
    return cmocka_run_group_tests_name("read_file", tests, NULL, NULL);
}

/* The `idemproxy records` command (records_cli.c). */
#ifndef IDEMPROXY_RECORDS_CLI_H
#define IDEMPROXY_RECORDS_CLI_H

/*
 * `idemproxy records [-c FILE] list|show|release|resolve ...`; argv[0] is
 * "records". Prints the JSON document on stdout and returns the exit code:
 * 0 done, 1 no such record, not stuck or an error, 2 bad usage.
 */
int records_main(int argc, char **argv);

#endif

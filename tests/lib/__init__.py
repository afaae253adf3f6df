"""The test harness the integration suite (tests/integration), the chaos
run (tests/chaos) and the HA stage (tests/ha) share; imported as tests.lib
from the repository root, never through sys.path. Leaves first: a module
imports only those above it in this list.

  procs            the root and the binary under test, bounded waits
                   (poll, wait_port), terminate, free_port, stderr checks
  http1            HTTP/1.1 client on raw sockets (Client, request, Response)
  expect           bodies, problem+json, owner and replay checks, requests
                   on threads (SlowOwner, Background, race)
  records          the record table (Records, sql), `idemproxy records`
  upstream         the test upstream's client side (Upstream, LogEntry)
  proxy            one idemproxy process (Proxy), its configuration
                   (BASE_ROUTES, base_settings, render_conf, check_config,
                   rewrite), migrate, wait_for_log
  cluster          a throwaway PostgreSQL cluster (Cluster, run_as_pg)
  admin            the admin listener: admin_proxy, admin, scope, metrics
  streams          streaming clients and memory-measured proxies
  h2               HTTP/2 clients: python3-h2 connections (Client), raw
                   frames (Raw, frame), curl and nghttp runs, CPU time
  jwtkit           JWKS and JWTs for the identity tests
  spellings        the real WSGI, ASGI and Node servers of the path tests
  checker          the chaos and HA runs' history and its checks 1-6
  harness          the chaos and HA runs' instances, clients and main
  helpers          the integration tests' one import: the everyday names
                   of the modules above, defined there

Programs, each started from the repository root with `/usr/bin/python3 -m`:
upstream_server (the test upstream), h2c_upstream (hypercorn: the same
in cleartext HTTP/2), spelling_apps (and spelling_app.js,
under node)."""

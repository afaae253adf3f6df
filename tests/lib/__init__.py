"""The test harness the integration suite (tests/integration), the chaos
run (tests/chaos) and the HA stage (tests/ha) share; imported as tests.lib
from the repository root, never through sys.path.

  helpers          HTTP/1.1 client on raw sockets, problem+json and
                   replay checks, the test upstream's client side
                   (Upstream, LogEntry), the record table (Records, sql),
                   processes and ports (poll, free_port, wait_port,
                   terminate), the binary under test
  cluster          a throwaway PostgreSQL cluster (Cluster, run_as_pg)
  proxy            one idemproxy process (Proxy), its configuration
                   (BASE_ROUTES, base_settings, render_conf), migrate,
                   rewrite and wait_for_log
  admin            the admin listener: admin_proxy, admin, scope, metrics
  records          `idemproxy records`, a record left unknown
  streams          streaming clients and memory-measured proxies
  jwtkit           JWKS and JWTs for the identity tests
  spellings        the real WSGI, ASGI and Node servers of the path tests
  checker          the chaos and HA runs' history and its checks 1-6
  harness          the chaos and HA runs' instances, clients and main

Programs (each started from the repository root as `/usr/bin/python3 -m`):
upstream_server (the test upstream), spelling_apps (and spelling_app.js
under node)."""

/* The server's Host, Origin and public-path rules (src/server/guard.c):
 * which requests a server bound to loopback, or exposed on another
 * address, lets through. */
#include "server/guard.h"
#include "testutil.h"

static void loopback_bound(void) {
    server_guard g;
    CHECK(server_guard_init(&g, "127.0.0.1", NULL) == 0);
    CHECK(g.loopback);
    /* Host: loopback names and the bound address, any port */
    CHECK(server_guard_host_ok(&g, "127.0.0.1:8080"));
    CHECK(server_guard_host_ok(&g, "localhost:8080"));
    CHECK(server_guard_host_ok(&g, "LOCALHOST"));
    CHECK(server_guard_host_ok(&g, "localhost.:8080"));
    CHECK(server_guard_host_ok(&g, "app.localhost:3000"));
    CHECK(server_guard_host_ok(&g, "127.8.9.10:1"));
    CHECK(server_guard_host_ok(&g, "[::1]:8080"));
    CHECK(server_guard_host_ok(&g, NULL));
    CHECK(server_guard_host_ok(&g, ""));
    /* rebinding names and other addresses */
    CHECK(!server_guard_host_ok(&g, "attacker.example"));
    CHECK(!server_guard_host_ok(&g, "attacker.example:8080"));
    CHECK(!server_guard_host_ok(&g, "localhost.attacker.example"));
    CHECK(!server_guard_host_ok(&g, "127.0.0.1.nip.io:8080"));
    CHECK(!server_guard_host_ok(&g, "192.168.1.5:8080"));
    CHECK(!server_guard_host_ok(&g, "0.0.0.0:8080"));
    CHECK(!server_guard_host_ok(&g, "[::1"));
    CHECK(!server_guard_host_ok(&g, "localhost:80x"));
    CHECK(!server_guard_host_ok(&g, "::1")); /* unbracketed v6 with a port is ambiguous */

    /* Origin: none (curl) passes; loopback origins on any port pass */
    CHECK(server_guard_origin_ok(&g, NULL, "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "http://127.0.0.1:8080", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "http://localhost:5173", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "https://localhost", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "http://[::1]:3000", "127.0.0.1:8080"));
    /* anything else is refused, even when it names the Host it sends */
    CHECK(!server_guard_origin_ok(&g, "http://evil.example", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://evil.example:8080", "evil.example:8080"));
    CHECK(!server_guard_origin_ok(&g, "null", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "file://", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://localhost.evil.example", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://127.0.0.1:8080/path", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "ftp://localhost", "127.0.0.1:8080"));
    server_guard_free(&g);

    CHECK(server_guard_init(&g, "[::1]", NULL) == 0);
    CHECK(g.loopback);
    CHECK(server_guard_host_ok(&g, "[::1]:9000"));
    CHECK(!server_guard_host_ok(&g, "evil.example:9000"));
    server_guard_free(&g);

    CHECK(server_guard_init(&g, "127.0.0.5", NULL) == 0);
    CHECK(server_guard_host_ok(&g, "127.0.0.5:1"));
    server_guard_free(&g);
}

static void exposed(void) {
    server_guard g;
    CHECK(server_guard_init(&g, "0.0.0.0", NULL) == 0);
    CHECK(!g.loopback);
    /* the operator exposed it: every Host is served */
    CHECK(server_guard_host_ok(&g, "mybox.lan:8080"));
    CHECK(server_guard_host_ok(&g, "192.168.1.5:8080"));
    /* its own page reached through an IP literal may POST */
    CHECK(server_guard_origin_ok(&g, "http://192.168.1.5:8080", "192.168.1.5:8080"));
    CHECK(server_guard_origin_ok(&g, "http://192.168.1.5", "192.168.1.5:80"));
    CHECK(server_guard_origin_ok(&g, "http://[fe80::1]:8080", "[fe80::1]:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://192.168.1.5:8081", "192.168.1.5:8080"));
    CHECK(!server_guard_origin_ok(&g, "https://192.168.1.5:8080", "192.168.1.5:8080:"));
    /* a name could be rebound to this address: only by pattern */
    CHECK(!server_guard_origin_ok(&g, "http://mybox.lan:8080", "mybox.lan:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://evil.example", "192.168.1.5:8080"));
    server_guard_free(&g);
}

static void patterns(void) {
    server_guard g;
    CHECK(server_guard_init(&g, "127.0.0.1", " http://mybox.lan:8080/ , https://*.example.org,chrome-extension://*") ==
          0);
    CHECK(g.n_origins == 3 && !g.any_origin);
    CHECK(server_guard_origin_ok(&g, "http://mybox.lan:8080", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "HTTP://MyBox.lan:8080", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "https://app.example.org", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "chrome-extension://abcdef", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://app.example.org", "127.0.0.1:8080"));
    CHECK(!server_guard_origin_ok(&g, "http://mybox.lan:8081", "127.0.0.1:8080"));
    /* an allowed origin does not widen the Host check */
    CHECK(!server_guard_host_ok(&g, "mybox.lan:8080"));
    server_guard_free(&g);

    CHECK(server_guard_init(&g, "127.0.0.1", "*") == 0);
    CHECK(g.any_origin);
    CHECK(server_guard_origin_ok(&g, "http://evil.example", "127.0.0.1:8080"));
    CHECK(server_guard_origin_ok(&g, "null", "127.0.0.1:8080"));
    server_guard_free(&g);

    CHECK(server_guard_init(&g, "127.0.0.1", ",, ,") == 0);
    CHECK(g.n_origins == 0 && !g.any_origin);
    server_guard_free(&g);
}

static void public_paths(void) {
    CHECK(server_guard_public_path("/"));
    CHECK(server_guard_public_path("/index.html"));
    CHECK(server_guard_public_path("/favicon.ico"));
    CHECK(server_guard_public_path("/assets/app.js"));
    CHECK(!server_guard_public_path("/assets/../v1/models"));
    CHECK(!server_guard_public_path("/v1/models"));
    CHECK(!server_guard_public_path("/api/tags"));
    CHECK(!server_guard_public_path("/metrics"));
    CHECK(!server_guard_public_path("/assets"));
    CHECK(!server_guard_public_path("//"));
}

int main(void) {
    loopback_bound();
    exposed();
    patterns();
    public_paths();
    return t_done();
}

/* The broker tests' harness (harness.h): a vhost per test, created and
 * deleted. */
#include "internal.h"

/* ---- vhosts ----------------------------------------------------------- */

int th_vhost_create(th_vhost *v, const char *tag) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  char base[TH_NAME_MAX - 24];
  size_t n = 0;
  for (const char *p = tag; *p != '\0' && n + 1 < sizeof base - 2; p++)
    base[n++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
  base[n] = '\0';
  th_unique(v->name, sizeof v->name, base);
  const char *host = "127.0.0.1";
  if (th__fmt(v->url, sizeof v->url, "amqp://guest:guest@%s:%d/%s", host, e->amqp_port, v->name))
    return -1;

  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/vhosts/%s", v->name);
  int status = th_mgmt("PUT", path, NULL, NULL);
  if (status != 201 && status != 204) {
    th__say("cannot create vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  snprintf(path, sizeof path, "/api/permissions/%s/guest", v->name);
  status = th_mgmt("PUT", path, "{\"configure\":\".*\",\"write\":\".*\",\"read\":\".*\"}", NULL);
  if (status != 201 && status != 204) {
    th__say("cannot grant guest on vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  return 0;
}

int th_vhost_delete(const th_vhost *v) {
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/vhosts/%s", v->name);
  int status = th_mgmt("DELETE", path, NULL, NULL);
  if (status != 204 && status != 404) {
    th__say("cannot delete vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  return 0;
}

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

/* ---- connections of a vhost (management API) -------------------------- */

bool th_connection_named(const th_vhost *v, const char *prefix, char *name, size_t len) {
  char path[TH_PATH_MAX];
  if (th__fmt(path, sizeof path, "/api/vhosts/%s/connections", v->name) != 0) return false;
  json_object *list = th_mgmt_get_json(path);
  bool found = false;
  size_t plen = strlen(prefix);
  for (size_t i = 0; !found && list != NULL && i < json_object_array_length(list); i++) {
    json_object *conn = json_object_array_get_idx(list, i), *props;
    if (!json_object_object_get_ex(conn, "client_properties", &props)) continue;
    if (strncmp(th_json_str(props, "connection_name"), prefix, plen) != 0) continue;
    found = th__fmt(name, len, "%s", th_json_str(conn, "name")) == 0;
  }
  json_object_put(list);
  return found;
}

int th_connection_close(const char *name) {
  /* The name ("127.0.0.1:p -> 127.0.0.1:q") URL-encoded into the path. */
  char enc[512] = "", path[TH_PATH_MAX];
  for (const char *p = name; *p != '\0'; p++) {
    size_t n = strlen(enc);
    if (n + 4 > sizeof enc) return -1;
    if (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_')
      enc[n] = *p, enc[n + 1] = '\0';
    else snprintf(enc + n, sizeof enc - n, "%%%02X", (unsigned char)*p);
  }
  if (th__fmt(path, sizeof path, "/api/connections/%s", enc) != 0) return -1;
  int status = th_mgmt("DELETE", path, NULL, NULL);
  if (status != 204 && status != 200) {
    th__say("cannot close connection %s (HTTP %d)", name, status);
    return -1;
  }
  return 0;
}

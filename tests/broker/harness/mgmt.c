/* The broker tests' harness (harness.h): the management API: requests, JSON,
 * the broker version. */
#include "internal.h"

/* ---- management API --------------------------------------------------- */

/* Reads all of f into a malloc'd NUL-terminated buffer. */
char *th__slurp(FILE *f, size_t *len_out) {
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  if (buf == NULL) return NULL;
  size_t n;
  while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len - 1 == 0) {
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        return NULL;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  buf[len] = '\0';
  if (len_out != NULL) *len_out = len;
  return buf;
}

int th_mgmt_post_file(const char *path, const char *file) {
  const th_env *e = th_env_get();
  if (e == NULL || strchr(path, '\'') != NULL || strchr(file, '\'') != NULL) return -1;
  char cmd[3 * TH_PATH_MAX];
  if (th__fmt(cmd, sizeof cmd,
              "curl -sS --max-time 30 -u guest:guest -H 'content-type: application/json' "
              "-o /dev/null -w '%%{http_code}' --data-binary @'%s' 'http://127.0.0.1:%d%s'",
              file, e->mgmt_port, path) != 0)
    return -1;
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  int status = -1;
  if (fscanf(p, "%d", &status) != 1) status = -1;
  return pclose(p) == 0 ? status : -1;
}

char *th_queue_list(const char *vhost) {
  char path[TH_PATH_MAX];
  if (th__fmt(path, sizeof path, "/api/queues/%s?columns=name,type,durable,arguments", vhost) != 0)
    return NULL;
  json_object *qs = th_mgmt_get_json(path);
  if (qs == NULL) return NULL;
  char *text = strdup(json_object_to_json_string_ext(qs, JSON_C_TO_STRING_SPACED));
  json_object_put(qs);
  return text;
}

int th_mgmt(const char *method, const char *path, const char *body, char **out) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  if (out != NULL) *out = NULL;
  /* Every path and body the tests send is built from [a-z0-9.-] names and
   * JSON without single quotes, so single-quoting is enough for the shell. */
  if (strchr(path, '\'') != NULL || (body != NULL && strchr(body, '\'') != NULL)) {
    th__say("refusing to pass a quote to the shell");
    return -1;
  }
  char cmd[4096];
  if (th__fmt(cmd, sizeof cmd,
              "curl -sS --max-time 30 -u guest:guest -X %s -H 'content-type: application/json'"
              " %s%s%s -w '\\n%%{http_code}' 'http://127.0.0.1:%d%s'",
              method, body ? "-d '" : "", body ? body : "", body ? "'" : "", e->mgmt_port,
              path) != 0) {
    th__say("management request too long");
    return -1;
  }
  FILE *p = popen(cmd, "r");
  if (p == NULL) {
    th__say("cannot run curl: %s", strerror(errno));
    return -1;
  }
  size_t len = 0;
  char *text = th__slurp(p, &len);
  int rc = pclose(p);
  if (text == NULL || rc != 0) {
    th__say("curl %s %s failed (status %d)", method, path, rc);
    free(text);
    return -1;
  }
  /* The last line is the status code that -w appended. */
  char *nl = strrchr(text, '\n');
  if (nl == NULL) {
    free(text);
    return -1;
  }
  int status = atoi(nl + 1);
  *nl = '\0';
  if (out != NULL) *out = text;
  else free(text);
  return status;
}

json_object *th_mgmt_get_json(const char *path) {
  char *text = NULL;
  int status = th_mgmt("GET", path, NULL, &text);
  json_object *obj = NULL;
  if (status == 200) {
    obj = json_tokener_parse(text);
    if (obj == NULL) th__say("GET %s: answer is not JSON", path);
  }
  free(text);
  return obj;
}

const char *th_json_str(json_object *obj, const char *key) {
  json_object *v = NULL;
  if (obj == NULL || !json_object_object_get_ex(obj, key, &v) ||
      !json_object_is_type(v, json_type_string))
    return "";
  return json_object_get_string(v);
}

int th_broker_version(void) {
  static int version = -1;
  if (version >= 0) return version;
  json_object *o = th_mgmt_get_json("/api/overview");
  int major = 0, minor = 0;
  const char *v = th_json_str(o, "rabbitmq_version");
  if (sscanf(v, "%d.%d", &major, &minor) == 2 && major > 0 && minor >= 0 && minor < 100)
    version = major * 100 + minor;
  else th__say("cannot read the node's rabbitmq_version (got '%s')", v);
  if (o != NULL) json_object_put(o);
  return version;
}

/* ---- users -------------------------------------------------------------- */

static bool put_ok(int status) { return status == 201 || status == 204; }

int th_user_put(const th_vhost *v, const char *name, const char *password, const char *perms) {
  char path[TH_PATH_MAX], body[512];
  if (!th_fmt(path, sizeof path, "/api/users/%s", name) ||
      !th_fmt(body, sizeof body, "{\"password\":\"%s\",\"tags\":\"\"}", password) ||
      !put_ok(th_mgmt("PUT", path, body, NULL)))
    return -1;
  if (!th_fmt(path, sizeof path, "/api/permissions/%s/%s", v->name, name) ||
      !put_ok(th_mgmt("PUT", path, perms, NULL)))
    return -1;
  return 0;
}

void th_user_delete(const char *name) {
  char path[TH_PATH_MAX];
  if (th_fmt(path, sizeof path, "/api/users/%s", name)) th_mgmt("DELETE", path, NULL, NULL);
}

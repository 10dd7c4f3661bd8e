/* Sign-in with the person's own broker credentials, the session table, and
 * the per-address limit on failed sign-ins. */
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dlqb/clock.h"
#include "dlqb/link.h"
#include "dlqb/log.h"

typedef struct {
  bool used;
  console_who who;
  int64_t seen_ms; /* monotonic: the idle clock */
} session_slot;

/* An address's sign-ins: the failures of the current window and the
 * attempts still waiting on the broker. A sign-in takes its place here
 * before it asks the broker, so a burst sent at once gets no more than the
 * limit through to the broker's login; a success ends its attempt and
 * clears nothing (another account's good password must not buy more
 * guesses at this one). */
typedef struct {
  char addr[64];
  int fails;
  int pending;
  int64_t first_ms; /* first attempt of the current window */
} fail_slot;

#define FAIL_SLOTS 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static session_slot sessions[CONSOLE_SESSIONS];
static fail_slot fails[FAIL_SLOTS];

static int64_t mono_ms(void) { return dlqb_mono_us() / 1000; }

void console_sessions_init(void) {
  pthread_mutex_lock(&lock);
  memset(sessions, 0, sizeof sessions);
  memset(fails, 0, sizeof fails);
  pthread_mutex_unlock(&lock);
}

void console_sessions_clear(void) {
  pthread_mutex_lock(&lock);
  explicit_bzero(sessions, sizeof sessions);
  pthread_mutex_unlock(&lock);
}

bool console_random_token(char *hex) {
  unsigned char raw[CONSOLE_TOKEN_HEX / 2];
  if (RAND_bytes(raw, sizeof raw) != 1) return false;
  for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  explicit_bzero(raw, sizeof raw);
  return true;
}

/* Appends s percent-encoded (userinfo of a URL) to out; false when full. */
static bool url_encode(char *out, size_t cap, size_t *at, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned c = *p;
    bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '.' || c == '_' || c == '~';
    size_t need = plain ? 1 : 3;
    if (*at + need + 1 > cap) return false;
    if (plain) out[(*at)++] = (char)c;
    else {
      out[(*at)++] = '%';
      out[(*at)++] = hex[c >> 4];
      out[(*at)++] = hex[c & 15];
    }
  }
  out[*at] = '\0';
  return true;
}

dlqb_broker_conf *console_user_broker(const dlqb_broker_conf *served, const console_who *who) {
  dlqb_broker_conf *b = malloc(sizeof *b);
  if (b == NULL) return NULL;
  memcpy(b, served, sizeof *b);
  b->password_file[0] = '\0';
  const char *u = served->url;
  const char *scheme_end = strstr(u, "://");
  const char *auth = scheme_end ? scheme_end + 3 : u;
  const char *auth_end = auth + strcspn(auth, "/?#");
  const char *host = auth;
  for (const char *p = auth; p < auth_end; p++)
    if (*p == '@') host = p + 1;
  char url[DLQB_CONFIG_STR_MAX];
  size_t at = (size_t)(auth - u);
  bool ok = at < sizeof url;
  if (ok) memcpy(url, u, at);
  ok = ok && url_encode(url, sizeof url, &at, who->user);
  if (ok && at + 2 < sizeof url) url[at++] = ':';
  else ok = false;
  ok = ok && url_encode(url, sizeof url, &at, who->password);
  if (ok && at + 2 < sizeof url) url[at++] = '@';
  else ok = false;
  size_t rest = strlen(host);
  ok = ok && at + rest + 1 <= sizeof url;
  if (ok) {
    memcpy(url + at, host, rest + 1);
    memcpy(b->url, url, sizeof url);
  } else {
    /* Too long to fit: a URL nobody can log in with rather than the
     * console's own credentials. */
    snprintf(b->url, sizeof b->url, "amqp://-:-@0.0.0.0:1/-");
  }
  explicit_bzero(url, sizeof url);
  return b;
}

void console_broker_free(dlqb_broker_conf *broker) {
  if (broker == NULL) return;
  explicit_bzero(broker, sizeof *broker);
  free(broker);
}

/* The failure slot of addr (creating one, evicting the oldest); lock held. */
static fail_slot *fail_slot_of(const char *addr, int64_t now) {
  fail_slot *oldest = &fails[0];
  for (size_t i = 0; i < FAIL_SLOTS; i++) {
    bool used = fails[i].fails > 0 || fails[i].pending > 0;
    if (used && strcmp(fails[i].addr, addr) == 0) {
      if (now - fails[i].first_ms > CONSOLE_LOGIN_WINDOW_MS) {
        fails[i].fails = 0;
        fails[i].first_ms = now;
      }
      return &fails[i];
    }
    if (fails[i].pending == 0 && (fails[i].fails == 0 || fails[i].first_ms < oldest->first_ms))
      oldest = &fails[i];
  }
  memset(oldest, 0, sizeof *oldest);
  snprintf(oldest->addr, sizeof oldest->addr, "%s", addr);
  return oldest;
}

/* Ends one attempt that console_sign_in let through, counting it as a
 * failure or not. */
static void attempt_end(const char *addr, bool failed) {
  pthread_mutex_lock(&lock);
  fail_slot *f = fail_slot_of(addr, mono_ms());
  if (f->pending > 0) f->pending--;
  if (failed) f->fails++;
  pthread_mutex_unlock(&lock);
}

/* The link could not be made at all (no TCP or TLS connection): the
 * broker's trouble, not the person's. dlqb_link_open says "cannot connect
 * to broker" then, and "cannot log in" once the broker has answered. */
static bool unreachable(const dlqb_error *err) {
  return strncmp(err->msg, "cannot connect to broker", 24) == 0;
}

bool console_sign_in(const dlqb_config *base, const char *addr, const char *user,
                     const char *password, console_who *who, char *why, size_t why_len,
                     unsigned *status) {
  *status = 403;
  int64_t now = mono_ms();
  pthread_mutex_lock(&lock);
  fail_slot *f = fail_slot_of(addr, now);
  /* Counted with the attempts still out: they may all fail. */
  bool blocked = f->fails + f->pending >= CONSOLE_LOGIN_FAILS;
  if (!blocked) {
    if (f->fails == 0 && f->pending == 0) f->first_ms = now;
    f->pending++;
  }
  pthread_mutex_unlock(&lock);
  if (blocked) {
    *status = 429;
    snprintf(why, why_len, "too many failed sign-ins from this address; wait a minute");
    return false;
  }
  memset(who, 0, sizeof *who);
  if (user[0] == '\0' || strlen(user) >= sizeof who->user ||
      strlen(password) >= sizeof who->password) {
    attempt_end(addr, false);
    snprintf(why, why_len, "give a broker user name and password");
    return false;
  }
  snprintf(who->user, sizeof who->user, "%s", user);
  snprintf(who->password, sizeof who->password, "%s", password);
  dlqb_broker_conf *user_broker = console_user_broker(&base->broker, who);
  dlqb_link *link = NULL;
  dlqb_error err = {{0}};
  dlqb_status st = user_broker == NULL
                       ? dlqb_fail(&err, DLQB_ENOMEM, "out of memory")
                       : dlqb_link_open(user_broker, "dlq-bridge console sign-in", &link, &err);
  console_broker_free(user_broker);
  if (st != DLQB_OK && unreachable(&err)) {
    /* Not a guess at a password: it does not count against the address. */
    attempt_end(addr, false);
    *status = 503;
    snprintf(why, why_len, "the broker cannot be reached, try again later: %s", err.msg);
    dlqb_log_warn("console", "sign-in of '%s' from %s: %s", user, addr, err.msg);
    explicit_bzero(who, sizeof *who);
    return false;
  }
  if (st != DLQB_OK) {
    attempt_end(addr, true);
    /* The link's message names host, user and vhost, never the password. */
    snprintf(why, why_len, "sign-in failed: %s", err.msg);
    dlqb_log_warn("console", "sign-in of '%s' from %s failed", user, addr);
    explicit_bzero(who, sizeof *who);
    return false;
  }
  dlqb_link_close(link);
  attempt_end(addr, false);
  if (!console_random_token(who->id) || !console_random_token(who->csrf)) {
    snprintf(why, why_len, "no random numbers for a session");
    explicit_bzero(who, sizeof *who);
    return false;
  }
  pthread_mutex_lock(&lock);
  /* A full table drops the longest idle session. */
  session_slot *slot = &sessions[0];
  for (size_t i = 0; i < CONSOLE_SESSIONS; i++) {
    if (!sessions[i].used) {
      slot = &sessions[i];
      break;
    }
    if (sessions[i].seen_ms < slot->seen_ms) slot = &sessions[i];
  }
  explicit_bzero(slot, sizeof *slot);
  slot->used = true;
  slot->who = *who;
  slot->seen_ms = mono_ms();
  pthread_mutex_unlock(&lock);
  dlqb_log_info("console", "'%s' signed in from %s", user, addr);
  return true;
}

bool console_session_find(const char *id, console_who *who) {
  bool found = false;
  int64_t now = mono_ms();
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < CONSOLE_SESSIONS; i++) {
    session_slot *s = &sessions[i];
    if (!s->used) continue;
    if (now - s->seen_ms > CONSOLE_SESSION_IDLE_MS) {
      explicit_bzero(s, sizeof *s);
      continue;
    }
    if (dlqb_secret_equal(s->who.id, id)) {
      s->seen_ms = now;
      *who = s->who;
      found = true;
    }
  }
  pthread_mutex_unlock(&lock);
  return found;
}

void console_session_end(const char *id) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < CONSOLE_SESSIONS; i++)
    if (sessions[i].used && dlqb_secret_equal(sessions[i].who.id, id))
      explicit_bzero(&sessions[i], sizeof sessions[i]);
  pthread_mutex_unlock(&lock);
}

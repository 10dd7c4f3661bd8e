/* The broker tests' harness (harness.h): a TCP proxy between clients and the
 * node (cut, swallow, a stalled delivery), and an HTTP GET. */
#include "internal.h"

/* ---- a TCP proxy between clients and the node ------------------------ */

static volatile sig_atomic_t th__proxy_swallowing;
static void th__on_usr1(int sig) {
  (void)sig;
  th__proxy_swallowing = 1;
}

/* AMQP 0-9-1 framing, as far as finding a basic.deliver needs: a frame is
 * type (1 byte), channel (2), payload size (4), payload, frame end (1); a
 * method frame's payload starts with its class and method ids (2 + 2). */
#define TH__FRAME_METHOD  1
#define TH__FRAME_HEAD    7
#define TH__METHOD_HEAD   11 /* frame header and the two ids */
#define TH__BASIC         60
#define TH__BASIC_DELIVER 60

/* One client's connection through the proxy. */
typedef struct {
  int cli, up; /* -1: the slot is free */
  /* The broker's stream, followed frame by frame until its first
   * basic.deliver (delivery_stall_ms only). */
  unsigned char head[TH__METHOD_HEAD];
  size_t nhead;
  uint64_t skip;      /* bytes of the current frame still to pass over */
  bool stalled_once;  /* its first delivery was seen: no more parsing */
  int64_t release_ms; /* > 0: what the broker sends waits until then */
  unsigned char *held;
  size_t nheld, held_cap;
  /* The client's stream, followed frame by frame (drop_publish_to only):
   * the current frame's first bytes, held until they show whether it is
   * the publish to cut the connection at; else the rest of it passes
   * (cskip). */
  unsigned char cbuf[7 + 4 + 2 + 256 + 256];
  size_t ncbuf;
  uint64_t cskip;
  /* connect_stall_ms: what the client sends waits until then. */
  int64_t client_release_ms;
  unsigned char *cheld;
  size_t ncheld, cheld_cap;
} th__pconn;

static void th__pconn_close(th__pconn *c) {
  if (c->cli >= 0) close(c->cli);
  if (c->up >= 0) close(c->up);
  free(c->held);
  free(c->cheld);
  *c = (th__pconn){.cli = -1, .up = -1};
}

static bool th__write_all(int fd, const unsigned char *b, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, b + off, n - off);
    if (w <= 0) return false;
    off += (size_t)w;
  }
  return true;
}

static bool th__hold(th__pconn *c, const unsigned char *b, size_t n) {
  if (c->nheld + n > c->held_cap) {
    size_t cap = (c->nheld + n) * 2;
    unsigned char *h = realloc(c->held, cap);
    if (h == NULL) return false;
    c->held = h;
    c->held_cap = cap;
  }
  memcpy(c->held + c->nheld, b, n);
  c->nheld += n;
  return true;
}

/* Follows the broker's frames through b[0..n). Returns the offset just past
 * the ids of the first basic.deliver (*found set), or n: the client then
 * holds the start of that frame, which it cannot read before the rest. */
static size_t th__find_deliver(th__pconn *c, const unsigned char *b, size_t n, bool *found) {
  size_t i = 0;
  *found = false;
  while (i < n) {
    if (c->skip > 0) {
      size_t take = c->skip < n - i ? (size_t)c->skip : n - i;
      i += take;
      c->skip -= take;
      continue;
    }
    c->head[c->nhead++] = b[i++];
    if (c->nhead != TH__FRAME_HEAD && c->nhead != TH__METHOD_HEAD) continue;
    uint32_t size = (uint32_t)c->head[3] << 24 | (uint32_t)c->head[4] << 16 |
                    (uint32_t)c->head[5] << 8 | (uint32_t)c->head[6];
    if (c->nhead == TH__FRAME_HEAD && c->head[0] == TH__FRAME_METHOD && size >= 4) continue;
    *found = c->nhead == TH__METHOD_HEAD && c->head[7] == 0 && c->head[8] == TH__BASIC &&
             c->head[9] == 0 && c->head[10] == TH__BASIC_DELIVER;
    c->skip = (uint64_t)size + 1 - (c->nhead - TH__FRAME_HEAD); /* the rest and the frame end */
    c->nhead = 0;
    if (*found) return i;
  }
  return i;
}

#define TH__BASIC_PUBLISH 40

/* Bytes of a frame's start that tell a basic.publish's routing key. */
static size_t th__publish_prefix(const unsigned char *h) {
  uint32_t size = (uint32_t)h[3] << 24 | (uint32_t)h[4] << 16 | (uint32_t)h[5] << 8 | h[6];
  size_t want = (size_t)TH__FRAME_HEAD + size + 1, cap = sizeof((th__pconn *)0)->cbuf;
  return want < cap ? want : cap;
}

/* Whether the frame starting in b (n bytes of it) is a basic.publish to
 * routing key rk. */
static bool th__is_publish_to(const unsigned char *b, size_t n, const char *rk) {
  if (n < TH__METHOD_HEAD + 2 + 1 || b[0] != TH__FRAME_METHOD || b[7] != 0 || b[8] != TH__BASIC ||
      b[9] != 0 || b[10] != TH__BASIC_PUBLISH)
    return false;
  size_t i = TH__METHOD_HEAD + 2; /* the reserved short */
  size_t xl = b[i++];
  i += xl; /* the exchange */
  if (i >= n) return false;
  size_t kl = b[i++];
  return i + kl <= n && kl == strlen(rk) && memcmp(b + i, rk, kl) == 0;
}

/* A connection has dropped its publish to drop_publish_to: no other will. */
static bool th__dropped_one;

/* Passes on what a client sent c, but for drop_publish_to (rk). */
static bool th__from_client(th__pconn *c, const unsigned char *b, size_t n, const char *rk) {
  if (rk[0] == '\0') return th__write_all(c->up, b, n);
  size_t i = 0;
  while (i < n) {
    if (c->cskip > 0) {
      size_t take = c->cskip < n - i ? (size_t)c->cskip : n - i;
      if (!th__write_all(c->up, b + i, take)) return false;
      i += take;
      c->cskip -= take;
      continue;
    }
    c->cbuf[c->ncbuf++] = b[i++];
    if (c->ncbuf < TH__FRAME_HEAD) continue;
    size_t prefix = th__publish_prefix(c->cbuf);
    if (c->ncbuf < prefix) continue;
    if (!th__dropped_one && th__is_publish_to(c->cbuf, c->ncbuf, rk)) {
      th__dropped_one = true;
      return false; /* the caller closes both ends: the publish is lost with them */
    }
    uint32_t size = (uint32_t)c->cbuf[3] << 24 | (uint32_t)c->cbuf[4] << 16 |
                    (uint32_t)c->cbuf[5] << 8 | c->cbuf[6];
    if (!th__write_all(c->up, c->cbuf, c->ncbuf)) return false;
    c->cskip = (uint64_t)TH__FRAME_HEAD + size + 1 - c->ncbuf;
    c->ncbuf = 0;
  }
  return true;
}

/* Passes on what the broker sent c: at once, or (stall_ms) from its first
 * delivery on, held until stall_ms after that delivery arrived. */
static bool th__from_broker(th__pconn *c, const unsigned char *b, size_t n, int stall_ms) {
  if (th__proxy_swallowing) return true;
  if (c->release_ms > 0) return th__hold(c, b, n);
  if (stall_ms <= 0 || c->stalled_once) return th__write_all(c->cli, b, n);
  bool found;
  size_t at = th__find_deliver(c, b, n, &found);
  if (!th__write_all(c->cli, b, at)) return false;
  if (!found) return true;
  c->stalled_once = true;
  c->release_ms = th__mono_ms() + stall_ms;
  return th__hold(c, b + at, n - at);
}

/* The proxy process: accepts on port, connects each client to the broker
 * and copies bytes both ways. After SIGUSR1 it discards what the broker
 * sends (confirms, deliveries) but keeps passing on what clients send. */
/* Holds what a client sent while its connection's stall lasts. */
static bool th__client_hold(th__pconn *c, const unsigned char *b, size_t n) {
  if (c->ncheld + n > c->cheld_cap) {
    size_t cap = (c->ncheld + n) * 2;
    unsigned char *h = realloc(c->cheld, cap);
    if (h == NULL) return false;
    c->cheld = h;
    c->cheld_cap = cap;
  }
  memcpy(c->cheld + c->ncheld, b, n);
  c->ncheld += n;
  return true;
}

static void th__proxy_main(int listen_fd, int broker_port, int stall_ms, const char *drop_rk,
                           int connect_stall_ms) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGUSR1, th__on_usr1);
  enum { MAXC = 64 };
  th__pconn c[MAXC];
  for (int i = 0; i < MAXC; i++) c[i] = (th__pconn){.cli = -1, .up = -1};
  unsigned char buf[65536];
  for (;;) {
    struct pollfd p[1 + 2 * MAXC];
    int n = 0, timeout = 1000;
    int64_t now = th__mono_ms();
    p[n++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (int i = 0; i < MAXC; i++) {
      p[n++] = (struct pollfd){.fd = c[i].cli, .events = POLLIN};
      p[n++] = (struct pollfd){.fd = c[i].up, .events = POLLIN};
      if (c[i].release_ms > 0 && c[i].release_ms - now < timeout)
        timeout = c[i].release_ms > now ? (int)(c[i].release_ms - now) : 0;
      if (c[i].client_release_ms > 0 && c[i].client_release_ms - now < timeout)
        timeout = c[i].client_release_ms > now ? (int)(c[i].client_release_ms - now) : 0;
    }
    if (poll(p, (nfds_t)n, timeout) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[0].revents & POLLIN) {
      int cl = accept(listen_fd, NULL, NULL);
      int slot = -1;
      for (int i = 0; i < MAXC && slot < 0; i++)
        if (c[i].cli < 0) slot = i;
      int u = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)broker_port)};
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (cl < 0 || slot < 0 || u < 0 || connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
        if (cl >= 0) close(cl);
        if (u >= 0) close(u);
      } else {
        /* cskip 8: the protocol header ("AMQP" 0 0 9 1) is no frame. */
        c[slot] = (th__pconn){.cli = cl, .up = u, .cskip = 8};
        if (connect_stall_ms > 0) c[slot].client_release_ms = th__mono_ms() + connect_stall_ms;
      }
    }
    for (int i = 0; i < MAXC; i++) {
      for (int dir = 0; dir < 2; dir++) {
        struct pollfd *pf = &p[1 + 2 * i + dir];
        if (pf->fd < 0 || !(pf->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = read(pf->fd, buf, sizeof buf);
        bool ok = got > 0;
        if (ok && dir == 0 && c[i].client_release_ms > 0)
          ok = th__client_hold(&c[i], buf, (size_t)got);
        else if (ok && dir == 0) ok = th__from_client(&c[i], buf, (size_t)got, drop_rk);
        else if (ok) ok = th__from_broker(&c[i], buf, (size_t)got, stall_ms);
        if (!ok) {
          th__pconn_close(&c[i]);
          break;
        }
      }
    }
    /* A stall over: what waited goes on, in order, before anything newer. */
    now = th__mono_ms();
    for (int i = 0; i < MAXC; i++) {
      if (c[i].client_release_ms <= 0 || now < c[i].client_release_ms) continue;
      c[i].client_release_ms = 0;
      bool ok = th__from_client(&c[i], c[i].cheld, c[i].ncheld, drop_rk);
      c[i].ncheld = 0;
      if (!ok) th__pconn_close(&c[i]);
    }
    for (int i = 0; i < MAXC; i++) {
      if (c[i].release_ms <= 0 || now < c[i].release_ms) continue;
      bool ok = th__write_all(c[i].cli, c[i].held, c[i].nheld);
      c[i].release_ms = 0;
      c[i].nheld = 0;
      if (!ok) th__pconn_close(&c[i]);
    }
  }
}

int th_proxy_start(th_proxy *px) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)px->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
    fprintf(stderr, "proxy: cannot listen on %d: %s\n", px->port, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t alen = sizeof a;
  if (getsockname(fd, (struct sockaddr *)&a, &alen) == 0) px->port = ntohs(a.sin_port);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return -1;
  }
  if (pid == 0)
    th__proxy_main(fd, e->amqp_port, px->delivery_stall_ms, px->drop_publish_to,
                   px->connect_stall_ms);
  close(fd);
  px->pid = pid;
  return 0;
}

void th_proxy_swallow(const th_proxy *px) {
  if (px->pid > 0) kill(px->pid, SIGUSR1);
}

void th_proxy_cut(th_proxy *px) {
  if (px->pid <= 0) return;
  kill(px->pid, SIGKILL);
  waitpid(px->pid, NULL, 0);
  px->pid = 0;
}

bool th_proxy_url_env(const th_proxy *px, const th_vhost *v, char *buf, size_t len) {
  return th_fmt(buf, len, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", px->port, v->name);
}

/* GETs http://127.0.0.1:port<path> through curl. Returns the HTTP status
 * (-1 when nothing answers) and the body in *body (malloc'd) if non-NULL. */
int th_http_get(int port, const char *path, char **body) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "curl -s --max-time 5 -w '\\n%%{http_code}' 'http://127.0.0.1:%d%s'",
           port, path);
  if (body != NULL) *body = NULL;
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  size_t cap = 1 << 16, len = 0, n;
  char *buf = malloc(cap);
  if (buf == NULL) {
    pclose(p);
    return -1;
  }
  while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) len += n;
  buf[len] = '\0';
  int rc = pclose(p);
  char *nl = strrchr(buf, '\n');
  int status = (rc == 0 && nl != NULL) ? atoi(nl + 1) : -1;
  if (nl != NULL) *nl = '\0'; /* the separator -w added */
  if (body != NULL && status > 0) *body = buf;
  else free(buf);
  return status;
}

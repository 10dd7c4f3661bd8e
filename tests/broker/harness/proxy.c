/* The broker tests' harness (harness.h): a TCP proxy between clients and the
 * node (cut, swallow), and an HTTP GET. */
#include "internal.h"

/* ---- a TCP proxy between clients and the node ------------------------ */

static volatile sig_atomic_t th__proxy_swallowing;
static void th__on_usr1(int sig) {
  (void)sig;
  th__proxy_swallowing = 1;
}

/* The proxy process: accepts on port, connects each client to the broker
 * and copies bytes both ways. After SIGUSR1 it discards what the broker
 * sends (confirms, deliveries) but keeps passing on what clients send. */
static void th__proxy_main(int listen_fd, int broker_port) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGUSR1, th__on_usr1);
  enum { MAXC = 16 };
  int cli[MAXC], up[MAXC];
  for (int i = 0; i < MAXC; i++) cli[i] = up[i] = -1;
  char buf[65536];
  for (;;) {
    struct pollfd p[1 + 2 * MAXC];
    int n = 0;
    p[n++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (int i = 0; i < MAXC; i++) {
      p[n++] = (struct pollfd){.fd = cli[i], .events = POLLIN};
      p[n++] = (struct pollfd){.fd = up[i], .events = POLLIN};
    }
    if (poll(p, (nfds_t)n, 1000) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[0].revents & POLLIN) {
      int c = accept(listen_fd, NULL, NULL);
      int slot = -1;
      for (int i = 0; i < MAXC && slot < 0; i++)
        if (cli[i] < 0) slot = i;
      int u = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)broker_port)};
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (c < 0 || slot < 0 || u < 0 || connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
        if (c >= 0) close(c);
        if (u >= 0) close(u);
      } else {
        cli[slot] = c;
        up[slot] = u;
      }
    }
    for (int i = 0; i < MAXC; i++) {
      for (int dir = 0; dir < 2; dir++) {
        struct pollfd *pf = &p[1 + 2 * i + dir];
        if (pf->fd < 0 || !(pf->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int from = dir == 0 ? cli[i] : up[i], to = dir == 0 ? up[i] : cli[i];
        ssize_t got = read(from, buf, sizeof buf);
        bool ok = got > 0;
        if (ok && !(dir == 1 && th__proxy_swallowing)) {
          for (ssize_t off = 0; ok && off < got;) {
            ssize_t w = write(to, buf + off, (size_t)(got - off));
            if (w <= 0) ok = false;
            else off += w;
          }
        }
        if (!ok) {
          close(cli[i]);
          close(up[i]);
          cli[i] = up[i] = -1;
          break;
        }
      }
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
  if (pid == 0) th__proxy_main(fd, e->amqp_port);
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

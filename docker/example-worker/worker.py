#!/usr/bin/env python3
"""An example dlq-bridge worker (docs/worker-guide.md), for the compose demo.

It publishes DEMO_TASKS tasks to dsr.work when it starts, then consumes
dsr.work and treats task number n by n % 4:
  0  succeeds at once
  1  fails once (basic.reject), succeeds after the bridge's retry
  2  reports its own error text once (worker_error via dsr.dlx), then succeeds
  3  always fails: after max_attempts (3) the bridge moves it to dsr.dlq.manual

Settings (environment): WORKER_URL (amqp://user@host:port/vhost),
WORKER_PASSWORD_FILE (the password, when the URL has none), DEMO_TASKS.
"""
import datetime
import json
import os
import signal
import sys
import time
import urllib.parse

import pika

WORK = "dsr.work"
DLX = "dsr.dlx"
LEDGER = "dsr.completed"


def connection_parameters():
    url = os.environ.get("WORKER_URL", "amqp://guest:guest@localhost:5672/%2f")
    path = os.environ.get("WORKER_PASSWORD_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
        # pika's URLParameters fails on a user without a password (Debian's
        # pika 1.2 and 1.3: TypeError in its own parser), so the password
        # goes into the URL it parses, percent-encoded; it is never printed.
        parts = urllib.parse.urlsplit(url)
        userinfo, at, hostport = parts.netloc.rpartition("@")
        if not at or not userinfo or ":" in userinfo:
            sys.exit("example-worker: WORKER_PASSWORD_FILE needs a WORKER_URL with a user and no password")
        netloc = f"{userinfo}:{urllib.parse.quote(password, safe='')}@{hostport}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    params = pika.URLParameters(url)
    params.heartbeat = 30
    return params


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def publish_demo_tasks(ch, count):
    run = datetime.datetime.now(datetime.timezone.utc).strftime("%H%M%S")
    for n in range(count):
        request_id = f"demo-{run}-{n}"
        headers = {
            "request_id": request_id,
            "source_system": "example-worker",
            "legal_basis": "gdpr_art_17",
            "action": "deletion",
            "max_attempts": 3,
            "first_seen_at": now_iso(),
            "demo_fate": n % 4,
        }
        props = pika.BasicProperties(message_id=f"msg-{request_id}", content_type="application/json",
                                     delivery_mode=2, app_id="example-worker", headers=headers)
        body = json.dumps({"subject": f"user-{n}", "request_id": request_id}).encode()
        ch.basic_publish("", WORK, body, props, mandatory=True)  # confirmed: raises on nack/return
    print(f"example-worker: published {count} demo tasks", flush=True)


def handle(ch, method, props, body, worker_user):
    headers = dict(props.headers or {})
    fate = int(headers.get("demo_fate", 0))
    attempt = int(headers.get("attempt", 0))
    rid = headers.get("request_id", "?")
    if fate == 1 and attempt == 0:
        print(f"example-worker: {rid} attempt {attempt}: reject", flush=True)
        ch.basic_reject(method.delivery_tag, requeue=False)
        return
    if fate == 2 and attempt == 0:
        # Our own error text travels as worker_error; ack only after the
        # republish is confirmed, or the task could be lost.
        headers["worker_error"] = "upstream crm timed out (demo)"
        ch.basic_publish(DLX, "", body, pika.BasicProperties(
            message_id=props.message_id, content_type=props.content_type, delivery_mode=2,
            app_id=props.app_id, timestamp=props.timestamp, headers=headers), mandatory=True)
        ch.basic_ack(method.delivery_tag)
        print(f"example-worker: {rid} attempt {attempt}: reported worker_error", flush=True)
        return
    if fate == 3:
        print(f"example-worker: {rid} attempt {attempt}: reject (always)", flush=True)
        ch.basic_reject(method.delivery_tag, requeue=False)
        return
    # Done: record it in the completion ledger, then ack. user_id is our own
    # broker user (the broker refuses any other): replay trusts the entry
    # only when that user is one of its completion_writers.
    # timestamp: when it was done, where `audit report` ends its response time.
    ch.basic_publish("", LEDGER, b"", pika.BasicProperties(
        user_id=worker_user, delivery_mode=2, timestamp=int(time.time()),
        headers={"request_id": rid, "source_system": headers.get("source_system", "")}),
        mandatory=True)
    ch.basic_ack(method.delivery_tag)
    print(f"example-worker: {rid} attempt {attempt}: done", flush=True)


def main():
    # As PID 1 in a container, SIGTERM is ignored unless handled.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    demo = int(os.environ.get("DEMO_TASKS", "0"))
    while True:
        try:
            params = connection_parameters()
            user = params.credentials.username
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.confirm_delivery()
            if demo > 0:
                publish_demo_tasks(ch, demo)
                demo = 0  # once, not after every reconnect
            ch.basic_qos(prefetch_count=1)  # a crash returns only the task in hand
            ch.basic_consume(WORK, lambda c, m, p, b: handle(c, m, p, b, user))
            print("example-worker: consuming dsr.work", flush=True)
            ch.start_consuming()
        except KeyboardInterrupt:
            return 0
        except pika.exceptions.AMQPError as e:
            print(f"example-worker: {type(e).__name__}: {e}; reconnecting in 3 s", file=sys.stderr, flush=True)
            time.sleep(3)


if __name__ == "__main__":
    sys.exit(main())

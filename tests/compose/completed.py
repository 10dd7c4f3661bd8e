"""Prints the request_id of every completion record in dsr.completed (a
stream), one a line: the compose test's count of the tasks done. Runs in the
example worker's image as the operator, who may read the ledger; the
password is read from /run/operator_password (mounted by the test). A record
whose user_id is not the worker's user (dsr-worker) fails it: replay would
not trust that completion (docs/worker-guide.md)."""
import sys
import urllib.parse

import pika

with open("/run/operator_password", encoding="utf-8") as f:
    password = f.readline().rstrip("\r\n")
url = f"amqp://dlq-operator:{urllib.parse.quote(password, safe='')}@rabbitmq:5672/%2f"
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
total = ch.queue_declare("dsr.completed", passive=True).method.message_count
ch.basic_qos(prefetch_count=100)
seen = 0
for method, props, _body in ch.consume("dsr.completed", arguments={"x-stream-offset": "first"},
                                        inactivity_timeout=10):
    if method is None:
        sys.exit(f"completed.py: dsr.completed went quiet after {seen} of {total} records")
    rid = (props.headers or {}).get("request_id", "?")
    if props.user_id != "dsr-worker":
        sys.exit(f"completed.py: the completion of {rid} has user_id {props.user_id!r}, not 'dsr-worker'")
    print(rid)
    ch.basic_ack(method.delivery_tag)
    seen += 1
    if seen >= total:
        break
conn.close()

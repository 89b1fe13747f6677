#!/usr/bin/env python3
"""Reads outbox-router's CloudEvents back with the CloudEvents Python SDK.

Either content mode (structured or binary) is recognised per record, as the Kafka
protocol binding says: `ce_` headers mean binary. Prints one JSON line per event:

    {"topic", "partition", "offset", "mode", "attributes": {...}, "data": ...}

where `data` is the SDK's data (a JSON value or a string) or, for bytes,
{"base64": "..."}; times print as RFC 3339. Avro data (`datacontenttype`
application/avro) with a `dataschema` is decoded with the schema fetched from that URL
(a Confluent-compatible registry's `/schemas/ids/{id}`): `data` is then the decoded
record and `schema_id` the id the value's framing names.

    pip install cloudevents==2.2.0 confluent-kafka==2.16.1 fastavro==1.13.1
    examples/cloudevents_consumer.py --bootstrap 127.0.0.1:9092 --topic outbox.event.Order --count 10

The suite runs it (tests/integration/cloudevents.rs) against the router's output.
"""

import argparse
import base64
import io
import json
import struct
import sys
import time
import urllib.request

from cloudevents.core.bindings.kafka import KafkaMessage, from_kafka_event
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


def readable(value):
    """A JSON-printable form of an attribute or of the data."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


SCHEMAS = {}


def avro_data(event, data):
    """Avro data decoded with the schema its `dataschema` URL serves, and the schema id
    of its Confluent framing (magic byte 0, 4-byte id), which must be the URL's."""
    import fastavro

    url = event.get_attributes()["dataschema"]
    if url not in SCHEMAS:
        with urllib.request.urlopen(url, timeout=10) as answer:
            SCHEMAS[url] = fastavro.parse_schema(json.loads(json.load(answer)["schema"]))
    magic, schema_id = struct.unpack(">bI", data[:5])
    if magic != 0 or not url.endswith(f"/{schema_id}"):
        sys.exit(f"event {event.get_id()}: framing {magic}/{schema_id} does not match {url}")
    return schema_id, fastavro.schemaless_reader(io.BytesIO(data[5:]), SCHEMAS[url])


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--bootstrap", required=True)
    args.add_argument("--topic", action="append", required=True)
    args.add_argument("--count", type=int, required=True, help="records to read, then stop")
    args.add_argument("--timeout-secs", type=float, default=60)
    opts = args.parse_args()

    consumer = Consumer({
        "bootstrap.servers": opts.bootstrap,
        "group.id": "cloudevents-consumer-example",
        "enable.auto.commit": False,
        # The router may publish in Kafka transactions: read only what committed.
        "isolation.level": "read_committed",
    })
    partitions = []
    for topic in opts.topic:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
    consumer.assign(partitions)

    deadline = time.monotonic() + opts.timeout_secs
    read = 0
    while read < opts.count:
        if time.monotonic() > deadline:
            sys.exit(f"read {read} of {opts.count} records within {opts.timeout_secs} s")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            sys.exit(f"consumer error: {msg.error()}")
        headers = {k: v for k, v in (msg.headers() or [])}
        binary = any(k.lower().startswith("ce_") for k in headers)
        event = from_kafka_event(KafkaMessage(headers=headers, key=msg.key(), value=msg.value() or b""))
        line = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "mode": "binary" if binary else "structured",
            "attributes": {k: readable(v) for k, v in event.get_attributes().items()},
            "data": readable(event.get_data()),
        }
        data = event.get_data()
        if "dataschema" in event.get_attributes() and data is not None:
            # Binary mode: the SDK makes text of a value that happens to be UTF-8.
            raw = data.encode("utf-8") if isinstance(data, str) else data
            line["schema_id"], line["data"] = avro_data(event, raw)
        print(json.dumps(line), flush=True)
        read += 1
    consumer.close()


if __name__ == "__main__":
    main()

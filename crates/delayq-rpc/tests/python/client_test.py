"""A Python client generated from proto/delayq.proto pushes, subscribes and finishes.

Usage: client_test.py HOST:PORT GENERATED_DIR

GENERATED_DIR holds delayq_pb2.py and delayq_pb2_grpc.py made by
`python -m grpc_tools.protoc`. Exits non-zero (with a message) on any failure.
"""

import sys

ADDRESS, GENERATED = sys.argv[1], sys.argv[2]
sys.path.insert(0, GENERATED)

import grpc  # noqa: E402
import delayq_pb2 as pb  # noqa: E402
import delayq_pb2_grpc as rpc  # noqa: E402

TOPIC = "python.client"
JOBS = 5


def check(condition, message):
    if not condition:
        raise SystemExit("python client: " + message)


def main():
    with grpc.insecure_channel(ADDRESS) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = rpc.DelayQueueServiceStub(channel)

        pushed = []
        for n in range(JOBS):
            reply = stub.Push(pb.PushRequest(topic=TOPIC, body="hello %d" % n, ttr_ms=10000), timeout=10)
            check(reply.id and reply.run_at > 0, "push answered %r" % reply)
            pushed.append(reply.id)

        try:
            stub.Push(pb.PushRequest(topic=TOPIC), timeout=10)
            check(False, "a push without a body was accepted")
        except grpc.RpcError as error:
            check(error.code() == grpc.StatusCode.INVALID_ARGUMENT, "code %s" % error.code())
            check(error.details() == "body is required", "details %r" % error.details())

        received = []
        stream = stub.Subscribe(pb.SubscribeRequest(topic=TOPIC, max_in_flight=2), timeout=30)
        for job in stream:
            check(job.topic == TOPIC and job.body.startswith("hello "), "job %r" % job)
            check(job.attempt == 1 and job.ttr_ms == 10000, "job %r" % job)
            stub.Finish(pb.FinishRequest(id=job.id, result="done by python"), timeout=10)
            received.append(job.id)
            if len(received) == JOBS:
                stream.cancel()
                break
        check(sorted(received) == sorted(pushed), "received %r, pushed %r" % (received, pushed))

        for job_id in pushed:
            details = stub.GetJob(pb.GetJobRequest(id=job_id), timeout=10)
            check(details.job.state == pb.JOB_STATE_FINISHED, "state of %s: %r" % (job_id, details.job.state))
            check(details.job.result == "done by python", "result of %s: %r" % (job_id, details.job.result))
            check(len(details.history) >= 3, "history of %s: %r" % (job_id, details.history))

    print("python client: pushed, subscribed and finished %d jobs" % JOBS)


if __name__ == "__main__":
    main()

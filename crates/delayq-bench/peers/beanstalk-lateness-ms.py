#!/usr/bin/env python3
"""W2 lateness over the beanstalkd protocol with delays to the millisecond.

The peer drivers' beanstalk/lateness.py sends whole seconds, ceil((due - now) / 1000),
as beanstalkd takes them, so no server can fire within a second of the intended due
time. delayq's beanstalk listener also takes a delay with up to three decimals
(`put 65536 1.250 60 100`, docs/beanstalk.md). This runs that same driver, unchanged,
with two things swapped in before it starts: the delay is computed to the millisecond
instead of rounded up, and greenstalk's put sends a fractional delay with three decimals.

  PEERS=/path/to/peers $PEERS/.venv/bin/python beanstalk-lateness-ms.py --port PORT [lateness.py flags]
"""
import os
import runpy
import sys

peers = os.environ["PEERS"]
sys.path[:0] = [os.path.join(peers, "beanstalk"), os.path.join(peers, "lib")]

import common  # noqa: E402  (the driver's own module, patched before lateness.py imports it)
import greenstalk  # noqa: E402


class _ToTheMillisecond:
    """Stands in for `math` in common.py, whose only use is the rounding up of the delay."""

    @staticmethod
    def ceil(seconds):
        return round(seconds, 3)


def _put(self, body, priority=greenstalk.DEFAULT_PRIORITY, delay=greenstalk.DEFAULT_DELAY, ttr=greenstalk.DEFAULT_TTR):
    buf = body.encode(self.encoding) if isinstance(body, str) else body
    millis = max(0, round(delay * 1000))
    cmd = b"put %d %d.%03d %d %d\r\n%b" % (priority, millis // 1000, millis % 1000, ttr, len(buf), buf)
    return self._int_cmd(cmd, b"INSERTED")


common.math = _ToTheMillisecond
greenstalk.Client.put = _put
sys.argv[0] = os.path.join(peers, "beanstalk", "lateness.py")
runpy.run_path(sys.argv[0], run_name="__main__")

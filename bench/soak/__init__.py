"""`reprise bench soak`: a moderate mixed load kept on a stack for minutes, and what it cost over time.

mix      the pure part: which request comes next, what counts as an error, p99 per minute, the memory
         summary (start, end, max, growth after the warm-up)
memory   each process of `reprise run` (its pidfiles) and its RSS from /proc, sampled on a thread
runner   the load loop over HTTP, the drain and the stuck count, the JSON report:
         {minutes, requests, errors, stuck, p99_ms_by_minute: [...], rss_mb: {process: {start, end, max}}}
"""

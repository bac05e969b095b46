"""Serving plumbing: how one server process shares one model among many sessions, apart from the model itself.

- ``serving.limits``: ``CallLimit``, a process-wide limit on model calls at once (one per core, one torch thread each);
- ``serving.worker``: ``ModelWorker``, the model calls in a worker process of their own (a GIL of its own).
- ``serving.heap``: ``freeze``, the loaded model and modules out of the cyclic GC's full collections;
- ``deploy.nginx_frontend``: deploy/nginx.conf run natively in front of local replicas (tests, bench/bench_class.py).

``ui/state.py`` puts every cached model call behind both; ``model/`` knows nothing of them.
"""

"""What a job is and where it goes. Stands on core and db.

celery_app, queues (the route table: each queue written once), dispatch (the one Dispatcher every
enqueue goes through), schedule (beat), admission (pure: route and k), representation (the job's JSON),
webhooks (signing, SSRF checks), decoding (the API's side of decode-on-read), passes/ (eviction,
retraining, reconciling: SQL + blobs + policy), policies/ (pure policies), pools/ (pool control).
"""

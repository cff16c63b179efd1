"""What runs on a worker. Stands on core, db and jobs; never imported by api/.

tasks (the Celery task bodies' registration), admission / generation / decoding / webhook_delivery
(the task bodies), notify, context (per-process state: settings, role, dispatcher, models), bootstrap
(start-up), role_switch and registry (the worker half of pool control), runtime/ (diffusion models,
embedders).
"""

"""HTTP only: routes, schemas, auth, problem+json errors. Never imports torch."""

"""Container runtime: the backend interface, the Docker backend, specs, lifecycle, reconcile."""

"""The HTTP surface: the WSGI app and its routes, request bodies and their validation, readiness, the console."""

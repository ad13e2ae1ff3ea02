"""The web dashboard over a run store: ``muster dashboard`` (``pip install "muster[dashboard]"``).

``app.create_app`` builds the read-only ASGI app (JSON API plus a static
single-page UI with vendored uPlot charts); ``server.serve`` binds it, with a
token required whenever the address is not loopback.
"""

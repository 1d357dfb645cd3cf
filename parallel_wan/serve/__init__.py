"""The server: `python -m parallel_wan.serve [run settings] port=8000 host=127.0.0.1
storage_dir=DIR` (torchrun for a torch mesh, backend=jax for a JAX one) loads the model once and
serves OpenAI's Videos API (README "Serving").

settings.py   the server's own settings (host, port, storage_dir, queue_url, limits), split from the run's
served.py     the start settings checked once; each request resolved on top of them (the CLI's checks)
fields.py     a request's fields → run settings (size, seconds, guidance mapping), and back (FIELD_OF)
words.py      every answer in the request's words: the CLI's settings named by their fields, no server path
store.py      the queue and job records (SQLite, or PostgreSQL: databases.py), claims, leases, retention
server.py     start-up as every entry point's (entry/started.py), rank 0's HTTP process, how it ends
worker.py     the loop every rank runs: claim, hand over, generate through jobs/, vote, write
http_process.py  the HTTP process (rank 0's child): app.py's routes (FastAPI) on the bound socket
app.py        the FastAPI app: the routers of routes/ (one per resource) behind the key check and body limit
auth.py, limits.py, uploads.py, files.py, metrics.py, page.py: the key, the body limit, images,
              the files of a job, Prometheus, the page

Only `settings`, `fields`, `words`, `served`, `store` and `files` import without the `serve` extra
(fastapi, uvicorn, prometheus-client, python-multipart).
"""

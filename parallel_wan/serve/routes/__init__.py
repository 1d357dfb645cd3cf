"""The HTTP routes, one module-level router per resource; app.py assembles them behind the key
check and the body limit, and gives them what they answer from (state.py).

videos.py          /v1/videos: create (queue), list, retrieve, content (the mp4), delete
video_requests.py  a create request's body read (JSON or form) and queued: the CLI's checks, no file left behind
video_objects.py   the bodies answered about videos: OpenAI's Video, why there is no content, the deleted object
models.py          /v1/models: the one model served
health.py          /health (readiness, asked without the key) and /metrics (Prometheus)
page.py            /: the page a browser gets
errors.py          OpenAI's error body, which every route and the key check answer with
state.py           ApiState: the store, the served model, settings, health, metrics and words of one app
"""

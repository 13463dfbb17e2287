"""OpenAI's API over the engine: protocol.py (request bodies -> prepared requests, sampling fields generated from
SamplingParams), responses.py (the Scheduler's typed events -> OpenAI's dicts, exceptions -> OpenAI's error shape),
client.py (the in-process API and the public Model that carries it), responses_api.py (OpenAI's Responses API over
the chat path). No web framework is imported here; the HTTP server (fastgguf.server) is a thin layer over these.
Nothing is imported here."""

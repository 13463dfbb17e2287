"""The API dialects over the engine, one module or package each: openai/ (OpenAI's API: request bodies -> prepared
requests, the Scheduler's events -> OpenAI's dicts, the in-process API and the public Model that carries it, and the
Responses API), anthropic.py (Anthropic's Messages API) and ollama.py (Ollama's API). Anthropic's and Ollama's bodies
become OpenAI bodies, prepared by openai.protocol, so every dialect runs the same path. No web framework is imported
here; the HTTP server (fastgguf.server) is a thin layer over these. Nothing is imported here."""

"""Running a model: Model (immutable weights, shared) and Context (one sequence's KV cache) in model.py,
SamplingParams (the one owner of sampling defaults) in params.py, generation (prompt -> decode loop -> text) in
generate.py and chat templates in chat.py. Nothing is imported here: fastgguf/__init__.py re-exports the public
names, and the native module imports params.py without pulling the rest in."""

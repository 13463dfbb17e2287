"""Running a model: Model (immutable weights, shared) and Context (one sequence's KV cache) in model.py,
SamplingParams (the one owner of sampling defaults) in params.py, one live sequence's sampling, detokenizing and
stopping in sequence.py, generation (prompt -> decode loop -> text) in generate.py, chat templates in chat.py, one
forward pass over several contexts in batch.py and the continuous-batching thread (typed events) in scheduler.py.
Nothing is imported here: fastgguf/__init__.py re-exports the public names, and the native module imports params.py
without pulling the rest in."""

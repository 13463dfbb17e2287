"""Pydantic models of every request and response of the HTTP API (OpenAI's shapes).

Request models type each field loosely where fastgguf validates it itself: sampling fields are checked by
SamplingParams (the one owner of that validation) through fastgguf.api.openai.protocol; fastgguf.api.openai.responses
builds the response dicts; the response models here describe those dicts (FastAPI validates them and shows them in /docs).

The sampling fields of the generation requests are generated from the fields protocol.SAMPLING_FIELDS reads (every
SamplingParams field and OpenAI's / llama.cpp's aliases), each typed from its SamplingParams field: a new field is in
the request models (and /docs) without being written here. Besides OpenAI's, they carry llama.cpp's extras
(`json_schema`, `grammar`: GBNF, `repeat_last_n`, `repetition_penalty`) and fastgguf's (`speculative`:
"prompt_lookup" or "none", `draft_max`, `draft_ngram_max`, `draft_ngram_min`).
"""
import dataclasses
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, create_model

from fastgguf.engine.params import SamplingParams
from fastgguf.api.openai.protocol import SAMPLING_FIELDS


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Request(_Loose):
    """A request body: strict types (pydantic's lax mode would turn `n: true` into 1 and `max_tokens: "5"` into 5
    before fastgguf's checks); a float field still takes a JSON integer."""
    model_config = ConfigDict(extra="allow", strict=True)


# A SamplingParams field's type in a JSON body: its own for numbers, these for the others (a body carries GBNF text,
# not a Grammar, and a speculative mode, not a draft Model). A field of another type fails here, at import.
_JSON_TYPES = {int: int, float: float, Optional[int]: int}
_JSON_FIELD_TYPES = {"stop": Union[str, List[str]], "logit_bias": Dict[str, Any], "json_schema": Dict[str, Any],
                     "grammar": str, "speculative": str}


def _sampling_fields():
    """{request field: (its optional JSON type, default None)} for every field protocol.SAMPLING_FIELDS reads."""
    fields = {f.name: f for f in dataclasses.fields(SamplingParams)}
    types = {name: _JSON_FIELD_TYPES.get(name) or _JSON_TYPES[f.type] for name, f in fields.items()}
    return {api: (Optional[types[name]], None) for api, name in SAMPLING_FIELDS}


_SamplingFields = create_model("_SamplingFields", __base__=_Request, __module__=__name__, **_sampling_fields())


class _Sampling(_SamplingFields):
    """A generation request: the sampling fields (generated above), then the rest."""
    model: Optional[str] = None
    n: Optional[int] = None
    stream: Optional[bool] = None
    stream_options: Optional[Dict[str, Any]] = None
    user: Optional[str] = None  # ignored


class ChatCompletionRequest(_Sampling):
    messages: Union[str, List[Dict[str, Any]]]
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    response_format: Optional[Any] = None
    tools: Optional[List[Any]] = None
    tool_choice: Optional[Any] = None
    parallel_tool_calls: Optional[Any] = None  # checked by fastgguf.engine.tools (a bool: no "no" -> False)
    reasoning_format: Optional[str] = None  # "parsed" (the server's default), "raw" or "none"


class CompletionRequest(_Sampling):
    prompt: Any = None  # a string, a list of strings, a list of token ids or a list of lists of token ids
    logprobs: Optional[int] = None
    echo: Optional[bool] = None
    suffix: Optional[str] = None
    best_of: Optional[int] = None
    response_format: Optional[Any] = None


class EmbeddingRequest(_Request):
    input: Any  # a string, a list of strings, a list of token ids or a list of lists of token ids
    model: Optional[str] = None
    encoding_format: Optional[str] = None  # "float" (default) or "base64"
    dimensions: Optional[int] = None  # only the model's n_embd
    user: Optional[str] = None  # ignored


class RerankRequest(_Request):
    # typed loosely: fastgguf.api.openai.protocol.prepare_rerank checks them (errors in OpenAI's shape)
    query: Any = None  # a string
    documents: Any = None  # a non-empty list of strings
    top_n: Any = None  # at most this many results (default: all)
    return_documents: Any = None  # each result also carries {"document": {"text": ...}}
    model: Optional[str] = None


class TokenizeRequest(_Request):
    content: str
    add_special: bool = True
    parse_special: bool = False
    with_pieces: bool = False  # llama-server's: each token as {"id", "piece"}
    model: Optional[str] = None


class DetokenizeRequest(_Request):
    tokens: List[int]
    model: Optional[str] = None


# -- responses -----------------------------------------------------------------------------------------------------

class PromptTokensDetails(_Loose):
    cached_tokens: int = 0


class Usage(_Loose):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: Optional[PromptTokensDetails] = None


class ToolCallFunction(_Loose):
    name: str
    arguments: str  # the arguments as JSON text


class ToolCall(_Loose):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(_Loose):
    role: Literal["assistant"]
    content: Optional[str]  # None when the reply is only tool calls
    reasoning_content: Optional[str] = None  # a thinking model's thoughts (reasoning_format "parsed")
    tool_calls: Optional[List[ToolCall]] = None


class ChatChoice(_Loose):
    index: int
    message: ChatMessage
    logprobs: Optional[Dict[str, Any]] = None
    finish_reason: Optional[str]


class ChatCompletion(_Loose):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: Optional[str] = None
    choices: List[ChatChoice]
    usage: Optional[Usage]


class ChatChunkChoice(_Loose):
    index: int
    delta: Dict[str, Any]
    logprobs: Optional[Dict[str, Any]] = None
    finish_reason: Optional[str]


class ChatCompletionChunk(_Loose):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatChunkChoice]
    usage: Optional[Usage] = None


class CompletionChoice(_Loose):
    index: int
    text: str
    logprobs: Optional[Dict[str, Any]] = None
    finish_reason: Optional[str]


class Completion(_Loose):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: Optional[str] = None
    choices: List[CompletionChoice]
    usage: Optional[Usage] = None


class Embedding(_Loose):
    object: Literal["embedding"]
    index: int
    embedding: Union[List[float], str]  # floats, or base64 of little-endian float32 with encoding_format=base64


class EmbeddingUsage(_Loose):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(_Loose):
    object: Literal["list"]
    data: List[Embedding]
    model: str
    usage: EmbeddingUsage


class RerankDocument(_Loose):
    text: str


class RerankResult(_Loose):
    index: int
    relevance_score: float
    document: Optional[RerankDocument] = None


class RerankResponse(_Loose):
    model: str
    object: Literal["list"] = "list"
    results: List[RerankResult]
    usage: EmbeddingUsage


class ModelCard(_Loose):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "fastgguf"
    # fastgguf's extras: the file's pooling_type (None: it does not say, a chat model), what the model is for
    pooling: Optional[str] = None
    embedding: Optional[bool] = None  # an embedding model (pooling none, mean, cls or last)
    rerank: Optional[bool] = None  # a reranker (pooling rank): /v1/rerank
    note: Optional[str] = None
    # llama-server's router mode: {"value": "loaded" | "loading" | "unloaded"}, "failed" and "error" after a load
    # that failed
    status: Optional[Dict[str, Any]] = None
    aliases: Optional[List[str]] = None  # llama-server's: the names --alias gave, and its --tags
    tags: Optional[List[str]] = None


class ModelList(_Loose):
    object: Literal["list"] = "list"
    data: List[ModelCard]


class TokenPiece(_Loose):
    id: int
    piece: Union[str, List[int]]  # the token's text, or its bytes when they are not valid UTF-8


class TokenizeResponse(_Loose):
    tokens: Union[List[int], List[TokenPiece]]


class DetokenizeResponse(_Loose):
    content: str


class Health(_Loose):
    status: str


class ErrorDetail(_Loose):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorResponse(_Loose):
    error: ErrorDetail

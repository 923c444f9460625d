"""Model names as the OpenTelemetry GenAI conventions spell their providers."""

from __future__ import annotations

import functools
import sys

# litellm's provider prefixes, as the GenAI conventions name the providers.
_PROVIDERS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "azure": "azure.ai.openai",
    "azure_text": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "deepseek": "deepseek",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "groq": "groq",
    "watsonx": "ibm.watsonx.ai",
    "watsonx_text": "ibm.watsonx.ai",
    "mistral": "mistral_ai",
    "perplexity": "perplexity",
    "xai": "x_ai",
}
# Where the deprecated gen_ai.system spells a provider differently.
_SYSTEMS = {"x_ai": "xai"}


@functools.lru_cache(maxsize=256)
def provider_of(model: str) -> tuple[str | None, str]:
    """The GenAI provider name and the provider's own model name, from
    litellm's ``provider/model``; a bare name is looked up in litellm's cost
    map if litellm is loaded (it is, in a worker)."""
    prefix, slash, rest = model.partition("/")
    if slash and rest:
        return _PROVIDERS.get(prefix, prefix), rest
    litellm = sys.modules.get("litellm")
    info = getattr(litellm, "model_cost", {}).get(model) if litellm is not None else None
    name = info.get("litellm_provider") if isinstance(info, dict) else None
    return (_PROVIDERS.get(name, name) if isinstance(name, str) else None), model


def system_of(provider: str) -> str:
    """The deprecated ``gen_ai.system`` spelling of a provider."""
    return _SYSTEMS.get(provider, provider)

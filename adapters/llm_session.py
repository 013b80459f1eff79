"""The decode suite's two parts served by one runtime session that keeps the KV cache itself
(llama.cpp's context, ORT GenAI's generator): the prefill sends the prompt's ids from slot 0,
the decode step its token at its position, and each returns the last logits with placeholder
caches, which the generation loop passes back unread."""
from __future__ import annotations

import re
from typing import Any, Protocol, Sequence

from .base import Compiled


class CachingSession(Protocol):
    empty: Any  # the placeholder caches (an empty tensor)

    def eval(self, tokens: list[int], start: int) -> Any: ...


class SessionPart(Compiled):
    """The prefill (``ids[1, P]``) or the decode step (``token, position, caches``) on one session."""

    def __init__(self, session: CachingSession, part: str):
        self.session, self.part = session, part

    def prepare(self, inputs: Sequence[Any]) -> Any:
        if self.part == "prefill":
            return inputs[0][0].tolist(), 0
        return [int(inputs[0].reshape(-1)[0])], int(inputs[1].reshape(-1)[0])

    def run(self, prepared: Any) -> Any:
        tokens, start = prepared
        return self.session.eval(tokens, start)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        return [outputs, self.session.empty, self.session.empty]


def shared_session(module: Any, example_inputs: Sequence[Any], runtime: str, load: Any) -> tuple[Any, str]:
    """The session a transformers decoder's prefill loads (``load(decoder)``) and its decode
    step reuses, and which part ``module`` is; a toy decoder or a batch above 1 is unavailable."""
    from .base import BackendUnavailable

    decoder = getattr(module, "decoder", None)
    if decoder is None or not hasattr(decoder, "lm"):
        raise BackendUnavailable(f"{runtime} takes the decode suite's transformers decoders (not the toy decoder)")
    if example_inputs[0].shape[0] != 1:
        raise BackendUnavailable(f"dlcompare runs {runtime} at batch 1 (one sequence)")
    attribute = "_" + re.sub(r"\W+", "_", runtime).lower() + "_session"  # one session per runtime on a decoder
    session = getattr(decoder, attribute, None)
    if session is None:
        session = load(decoder)
        setattr(decoder, attribute, session)
    return session, "prefill" if len(example_inputs) == 1 else "decode"

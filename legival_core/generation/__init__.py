"""Teacher trace generation (issue 7, part 1): model configs, engines, reasoning extraction, cache."""

from legival_core.generation.config import Decoding, ModelConfig, load_model_config
from legival_core.generation.engines import BackendEngine, ChatEndpointEngine, RawOutput, TeacherEngine
from legival_core.generation.extract import Extracted, extract_reasoning, opened_in_prompt

__all__ = ["BackendEngine", "ChatEndpointEngine", "Decoding", "Extracted", "ModelConfig", "RawOutput",
           "TeacherEngine", "extract_reasoning", "load_model_config", "opened_in_prompt"]

from nvllm.models.registry import MODEL_REGISTRY, model_class

__all__ = ["MODEL_REGISTRY", "model_class"]

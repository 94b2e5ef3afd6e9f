"""The engines behind one seam: the torch engine (`engine/torch/`), the llama.cpp engine (`engine/llama_cpp/`), and what they share (the pin, model specs, prompt ids, the device name)."""

# Sourced by the experiment scripts: the engine options and the naming scheme's marker for them (docs/manifests.md).
# ENGINE=torch (default): --dtype DTYPE, marked -bf16 for bfloat16. ENGINE=llama.cpp: the GGUF file on llama.cpp
# with a KV cache of KV (f16 by default), marked -llama-KV; DTYPE does not apply (the weights as stored).
ENGINE=${ENGINE:-torch}; KV=${KV:-f16}
case "$ENGINE" in
  torch) ENGINE_ARGS=(--dtype "$DTYPE"); MARK=$([ "$DTYPE" = bfloat16 ] && echo -bf16 || :) ;;
  llama.cpp) ENGINE_ARGS=(--engine llama.cpp --kv-type "$KV"); MARK="-llama-$KV" ;;
  *) echo "ENGINE must be torch or llama.cpp, not '$ENGINE'" >&2; exit 2 ;;
esac

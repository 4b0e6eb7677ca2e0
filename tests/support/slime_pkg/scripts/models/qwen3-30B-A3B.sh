# slime's model script: defines MODEL_ARGS (the stand-in's values are a tiny model's; its flags are the
# ones engines/slime/models.yaml lists as script_flags, which check_pin compares with the real script)
MODEL_ARGS=(
   --disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads 2 --num-query-groups 1
   --kv-channels 4 --num-layers 2 --hidden-size 8 --ffn-hidden-size 16 --normalization RMSNorm
   --position-embedding-type rope --norm-epsilon 1e-6 --rotary-percent 1.0 --swiglu
   --untie-embeddings-and-output-weights --vocab-size 16 --rotary-base 10000
   --moe-ffn-hidden-size 4 --moe-router-score-function softmax --moe-token-dispatcher-type alltoall
   --moe-router-topk 2 --moe-layer-freq 1 --num-experts 4 --moe-grouped-gemm --moe-token-drop-policy probs
   --moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0
)

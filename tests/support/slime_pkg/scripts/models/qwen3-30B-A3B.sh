# slime's model script: defines MODEL_ARGS (the stand-in's are a tiny model's)
MODEL_ARGS=(--num-layers 2 --hidden-size 8)

# Run `split-k`: the skinny kernel with K split over programs, the layers' shapes of both models.
source .device/setup.sh
mkdir -p $OUT/r; cd .device/splitk; export PYTHONPATH=$PWD/../fa2:$PWD
t "check"; timeout 40 python3 ../splitk_check.py 2>&1 | tail -30
t "compile"; timeout 60 python3 -m experiments.skinny_matmul_bench --split-k --jobs 14 --compile-only > $OUT/r/compile.txt 2>&1; tail -3 $OUT/r/compile.txt
t "split-k sweep"; timeout 80 python3 -m experiments.skinny_matmul_bench --split-k --model qwen3-8b > $OUT/r/split-k.txt 2>&1; cat $OUT/r/split-k.txt | cut -c1-330
t done

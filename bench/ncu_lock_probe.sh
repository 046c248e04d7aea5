set -x
cd /tmp && rm -rf p && cp -r $REPO/examples/ece408-conv p && cd p && make -s m2 >/dev/null 2>&1; ls -la m2
export FASHION_MNIST_DIR=$REPO/.gpu/fmnist RAI_WEIGHTS=$REPO/examples/ece408-conv/weights/ece408.bin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
echo "== shared tmp"
for i in 1 2 3 4; do ( $NCU --section SpeedOfLight ./m2 100 > /tmp/s$i.txt 2>&1; echo "s$i exit $?" ) & done; wait
grep -h "ERROR" /tmp/s*.txt | sort | uniq -c
echo "== private TMPDIR"
for i in 1 2 3 4; do mkdir -p /tmp/t$i; ( TMPDIR=/tmp/t$i $NCU --section SpeedOfLight ./m2 100 > /tmp/p$i.txt 2>&1; echo "p$i exit $?" ) & done; wait
grep -h "ERROR" /tmp/p*.txt | sort | uniq -c
ls -la /tmp/t1 /tmp | grep -i nsight

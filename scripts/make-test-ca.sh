#!/usr/bin/env bash
# Makes a throwaway CA and certificates for TLS on 127.0.0.1 (tests and local trials;
# never for production). Usage: scripts/make-test-ca.sh DIR
# Writes DIR/ca.{crt,key}, DIR/server.{crt,key} (CN and SAN 127.0.0.1, localhost) and
# DIR/client.{crt,key} (a client certificate for mutual TLS), all signed by the CA.
set -euo pipefail
DIR=${1:?usage: make-test-ca.sh DIR}
mkdir -p "$DIR"
cd "$DIR"
command -v openssl >/dev/null || { echo "make-test-ca: openssl is missing; run scripts/install-deps.sh" >&2; exit 1; }
quiet() { "$@" >/dev/null 2>&1 || { echo "make-test-ca: failed: $*" >&2; exit 1; }; }

quiet openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=Nightshift test CA" \
  -keyout ca.key -out ca.crt
cat > server.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
EXT
cat > client.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EXT
for who in server client; do
  quiet openssl req -newkey rsa:2048 -nodes -subj "/CN=${who/server/127.0.0.1}" -keyout "$who.key" -out "$who.csr"
  quiet openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$who.ext" -out "$who.crt"
  rm -f "$who.csr" "$who.ext"
done
chmod 600 ./*.key
echo "make-test-ca: CA and certificates in $DIR"

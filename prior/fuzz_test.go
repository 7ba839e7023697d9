package prior

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// sealed wraps body in the magic, version and checksum an encoding
// carries, so that the fuzzer's mutations reach the decoder's checks of
// sizes, names and values instead of stopping at the checksum.
func sealed(magic string, version uint32, body []byte) []byte {
	b := append([]byte(magic), binary.LittleEndian.AppendUint32(nil, version)...)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// body strips what sealed adds.
func body(enc []byte, magic string) []byte { return enc[len(magic)+4 : len(enc)-4] }

// FuzzUnmarshal decodes arbitrary VAE and Terms encodings (with a valid
// checksum): never a panic or an allocation the data cannot back, and a
// decoded value encodes back to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := NewVAE(9, tinyConfig())
	venc, err := v.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	tenc, err := v.Terms(uniformSets(9, 12, 0.2, rng), 8, rng).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(false, body(venc, vaeMagic))
	f.Add(true, body(tenc, termsMagic))
	f.Add(true, []byte{})
	f.Fuzz(func(t *testing.T, terms bool, b []byte) {
		if terms {
			data := sealed(termsMagic, termsVersion, b)
			var got Terms
			if got.UnmarshalBinary(data) != nil {
				return
			}
			again, err := got.MarshalBinary()
			if err != nil || !bytes.Equal(again, data) {
				t.Fatalf("decoded terms do not encode back: %v", err)
			}
			return
		}
		data := sealed(vaeMagic, vaeVersion, b)
		var got VAE
		if got.UnmarshalBinary(data) != nil {
			return
		}
		again, err := got.MarshalBinary()
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("decoded VAE does not encode back: %v", err)
		}
	})
}

package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// ErrCorruptMetadata is returned by DecodeMetadata for bytes EncodeMetadata did not make.
var ErrCorruptMetadata = errors.New("persistence: corrupt metadata")

// metadataVersion starts every encoding so the format can change without ambiguity.
const metadataVersion = 1

// EncodeMetadata turns message headers into bytes a store can keep in a binary column. It is exact
// for any strings (invalid UTF-8 included, which JSON would replace) and deterministic: keys are
// written sorted.
func EncodeMetadata(md map[string]string) []byte {
	keys := make([]string, 0, len(md))
	size := 1 + binary.MaxVarintLen64
	for k, v := range md {
		keys = append(keys, k)
		size += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	sort.Strings(keys)
	buf := make([]byte, 0, size)
	buf = append(buf, metadataVersion)
	buf = binary.AppendUvarint(buf, uint64(len(keys)))
	for _, k := range keys {
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		v := md[k]
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return buf
}

// DecodeMetadata reverses EncodeMetadata. Empty input decodes to an empty map.
func DecodeMetadata(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return map[string]string{}, nil
	}
	if b[0] != metadataVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptMetadata, b[0])
	}
	b = b[1:]
	n, err := readUvarint(&b)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrCorruptMetadata, n, len(b))
	}
	md := make(map[string]string, n)
	for i := uint64(0); i < n; i++ {
		k, err := readString(&b)
		if err != nil {
			return nil, err
		}
		v, err := readString(&b)
		if err != nil {
			return nil, err
		}
		md[k] = v
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptMetadata, len(b))
	}
	return md, nil
}

func readUvarint(b *[]byte) (uint64, error) {
	v, n := binary.Uvarint(*b)
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad length", ErrCorruptMetadata)
	}
	*b = (*b)[n:]
	return v, nil
}

func readString(b *[]byte) (string, error) {
	n, err := readUvarint(b)
	if err != nil {
		return "", err
	}
	if n > uint64(len(*b)) {
		return "", fmt.Errorf("%w: string of %d bytes in %d", ErrCorruptMetadata, n, len(*b))
	}
	s := string((*b)[:n])
	*b = (*b)[n:]
	return s, nil
}

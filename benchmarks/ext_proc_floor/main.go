// The ext_proc floor, compiled: an ExternalProcessor that decides nothing, one empty answer per message, as
// benchmarks/gateway_overhead.py's Python floor does on grpc.aio. benchmarks/gateway_cpu.py runs both behind the
// same rendered Envoy to measure what the ext_proc contract costs a compiled processor per message against a Python
// one (issue 33: is the per-message cost Python's, or the contract's?).
//
// It uses no generated code: messages stay bytes (a codec that passes them through), and the answer to a request
// message is the response message with the matching oneof field set to an empty message. Field numbers, from
// envoy/service/ext_proc/v3/external_processor.proto (Envoy 1.40):
//
//	ProcessingRequest:  request_headers 2, response_headers 3, request_body 4, response_body 5,
//	                    request_trailers 6, response_trailers 7
//	ProcessingResponse: request_headers 1, response_headers 2, request_body 3, response_body 4,
//	                    request_trailers 5, response_trailers 6
//
// so each answer's field is the request's minus one. A message with observability_mode (ProcessingRequest field 10)
// set gets no answer, as Envoy expects of a filter in observability mode. Builds with Debian 12's golang-go and golang-google-grpc-dev
// (grpc-go 1.33), without modules: GO111MODULE=off GOPATH=/usr/share/gocode go build.
package main

import (
	"errors"
	"flag"
	"io"
	"log"
	"net"

	"google.golang.org/grpc"
)

// rawCodec hands messages over as the bytes on the wire, both ways.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	p := v.(*[]byte)
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) String() string { return "proto" }

// varint reads a base-128 varint at data[i:], returning it and the index after it.
func varint(data []byte, i int) (uint64, int, error) {
	var value uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(data) {
			return 0, 0, errors.New("truncated varint")
		}
		b := data[i]
		i++
		value |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return value, i, nil
		}
	}
	return 0, 0, errors.New("varint too long")
}

// requestField is the number of the ProcessingRequest's oneof field that is set (2-7), and whether the message
// says observability_mode (field 10): Envoy then expects no answer.
func requestField(data []byte) (uint64, bool, error) {
	var field uint64
	observing := false
	for i := 0; i < len(data); {
		tag, next, err := varint(data, i)
		if err != nil {
			return 0, false, err
		}
		number, wire := tag>>3, tag&7
		switch wire {
		case 0:
			var value uint64
			value, next, err = varint(data, next)
			if number == 10 {
				observing = value != 0
			}
		case 1:
			next += 8
		case 2:
			var length uint64
			length, next, err = varint(data, next)
			next += int(length)
			if number >= 2 && number <= 7 {
				field = number
			}
		case 5:
			next += 4
		default:
			err = errors.New("unexpected wire type")
		}
		if err != nil {
			return 0, false, err
		}
		i = next
	}
	if field == 0 {
		return 0, false, errors.New("no request, response headers, body or trailers set")
	}
	return field, observing, nil
}

func process(_ interface{}, stream grpc.ServerStream) error {
	var in []byte
	out := make([]byte, 2)
	for {
		if err := stream.RecvMsg(&in); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		field, observing, err := requestField(in)
		if err != nil {
			return err
		}
		if observing {
			continue
		}
		out[0], out[1] = byte((field-1)<<3|2), 0 // the answer's field, length-delimited, empty
		if err := stream.SendMsg(&out); err != nil {
			return err
		}
	}
}

var service = grpc.ServiceDesc{
	ServiceName: "envoy.service.ext_proc.v3.ExternalProcessor",
	HandlerType: (*interface{})(nil),
	Streams: []grpc.StreamDesc{
		{StreamName: "Process", Handler: process, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "envoy/service/ext_proc/v3/external_processor.proto",
}

func main() {
	address := flag.String("listen", "127.0.0.1:0", "host:port to serve ext_proc on")
	flag.Parse()
	listener, err := net.Listen("tcp", *address)
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer(grpc.CustomCodec(rawCodec{}))
	server.RegisterService(&service, struct{}{})
	log.Fatal(server.Serve(listener))
}

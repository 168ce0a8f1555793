// nullkafka: a Kafka-wire server that costs (almost) nothing, the measured "free server"
// ceiling of bench/bench_vs_kafka.py --ceiling (issue 20; docs/benchmarks.md).
//
// It speaks what that bench drives and nothing more: ApiVersions, Metadata, CreateTopics,
// InitProducerId, Produce, Fetch, ListOffsets and the classic consumer group
// (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetFetch, OffsetCommit, LeaveGroup).
// Produced record batches are kept in memory, one copy each (the request's own buffer), their
// baseOffset patched in place as Kafka does (the CRC does not cover it); a Fetch answer is the
// stored batches, whole, written with one writev after a hand-written header: no
// re-encoding. No disk, no fsync, no replication, no retention, no transactions, no
// idempotence checks (InitProducerId hands out ids; sequences are not checked), one member
// per consumer group (a join replaces the group's members). It is a ceiling, not a broker.
//
//	nullkafka --listen 127.0.0.1:0      # prints the bound address on its first line
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	maxFrame       = 100 << 20 // bytes: a larger frame is refused and its connection closed
	batchHeaderLen = 61        // a v2 record batch's header, up to and with its record count
)

// Kafka error codes used here.
const (
	errNone                = 0
	errOffsetOutOfRange    = 1
	errCorruptMessage      = 2
	errUnknownTopic        = 3
	errIllegalGeneration   = 22
	errUnknownMemberID     = 25
	errRebalanceInProgress = 27
	errUnsupportedVersion  = 35
	errTopicAlreadyExists  = 36
	errInvalidPartitions   = 37
	errInvalidRequest      = 42
	errPolicyViolation     = 44
	errMemberIDRequired    = 79
)

// The versions answered, per API key: within kmsg's and below any version that names topics
// by id only (Produce v13, Fetch v13) or needs what is not here.
var supported = map[int16][2]int16{
	0:  {3, 11}, // Produce
	1:  {4, 12}, // Fetch
	2:  {1, 7},  // ListOffsets
	3:  {1, 12}, // Metadata
	8:  {2, 8},  // OffsetCommit
	9:  {1, 7},  // OffsetFetch
	10: {0, 4},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	18: {0, 3},  // ApiVersions
	19: {2, 7},  // CreateTopics
	22: {0, 4},  // InitProducerId
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// partition: its batches in offset order, each one stored slice (header patched).
type partition struct {
	mu      sync.Mutex
	batches [][]byte
	bases   []int64       // each batch's base offset
	next    int64         // the high watermark: the next offset to assign
	grew    chan struct{} // closed (and replaced) on each append: wakes waiting fetches
}

type group struct {
	generation int32
	member     string
	protocol   string
	assignment []byte
	offsets    map[string]map[int32]int64
}

type server struct {
	host     string
	port     int32
	maxBytes int64 // the in-memory limit of all partitions

	mu         sync.Mutex
	topics     map[string][]*partition
	groups     map[string]*group
	nextPID    int64
	nextMember int64
	held       int64 // bytes held in partitions
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9092", "address to listen on (port 0: any free port)")
	maxMiB := flag.Int64("max-mib", 8192, "refuse produce once the partitions hold this many MiB")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	s := &server{
		host:     addr.IP.String(),
		port:     int32(addr.Port),
		maxBytes: *maxMiB << 20,
		topics:   map[string][]*partition{},
		groups:   map[string]*group{},
		nextPID:  1000,
	}
	fmt.Println(addr.String())
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go s.serve(c.(*net.TCPConn))
	}
}

// serve answers one connection's requests one at a time, in order.
func (s *server) serve(c *net.TCPConn) {
	defer c.Close()
	_ = c.SetNoDelay(true)
	r := bufio.NewReaderSize(c, 64<<10)
	var lenBuf [4]byte
	for {
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			return
		}
		n := int32(binary.BigEndian.Uint32(lenBuf[:]))
		if n < 8 || n > maxFrame {
			log.Printf("%s: frame of %d bytes refused (limit %d)", c.RemoteAddr(), n, maxFrame)
			return
		}
		frame := make([]byte, n) // kept: produced batches are slices of it
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		out, err := s.handle(frame)
		if err != nil {
			log.Printf("%s: %v", c.RemoteAddr(), err)
			return
		}
		if _, err := out.WriteTo(c); err != nil {
			return
		}
	}
}

// handle decodes one request frame and returns its answer, length prefix included.
func (s *server) handle(frame []byte) (net.Buffers, error) {
	key := int16(binary.BigEndian.Uint16(frame[0:2]))
	version := int16(binary.BigEndian.Uint16(frame[2:4]))
	corr := frame[4:8]
	req := kmsg.RequestForKey(key)
	vr, ok := supported[key]
	if req == nil || !ok {
		return nil, fmt.Errorf("API key %d not served", key)
	}
	if version < vr[0] || version > vr[1] {
		if key == 18 { // ApiVersions: answer v0 with the versions served
			return frameOf(corr, false, s.apiVersions(0, errUnsupportedVersion)), nil
		}
		return nil, fmt.Errorf("API key %d version %d not served (%d-%d)", key, version, vr[0], vr[1])
	}
	req.SetVersion(version)
	body := frame[8:]
	// client_id: a nullable string
	if len(body) < 2 {
		return nil, errors.New("short request header")
	}
	if l := int16(binary.BigEndian.Uint16(body)); l > 0 {
		if len(body) < 2+int(l) {
			return nil, errors.New("short request header")
		}
		body = body[2+int(l):]
	} else {
		body = body[2:]
	}
	if req.IsFlexible() { // header tagged fields
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("API key %d v%d: %w", key, version, err)
	}
	// response header v1 (tagged fields) for flexible versions, ApiVersions' always v0
	flex := req.IsFlexible() && key != 18
	var resp kmsg.Response
	switch q := req.(type) {
	case *kmsg.ApiVersionsRequest:
		resp = s.apiVersions(version, errNone)
	case *kmsg.MetadataRequest:
		resp = s.metadata(q)
	case *kmsg.CreateTopicsRequest:
		resp = s.createTopics(q)
	case *kmsg.InitProducerIDRequest:
		resp = s.initProducerID(q)
	case *kmsg.ProduceRequest:
		resp = s.produce(q)
	case *kmsg.FetchRequest:
		return s.fetch(q, corr, flex), nil
	case *kmsg.ListOffsetsRequest:
		resp = s.listOffsets(q)
	case *kmsg.FindCoordinatorRequest:
		resp = s.findCoordinator(q)
	case *kmsg.JoinGroupRequest:
		resp = s.joinGroup(q)
	case *kmsg.SyncGroupRequest:
		resp = s.syncGroup(q)
	case *kmsg.HeartbeatRequest:
		resp = s.heartbeat(q)
	case *kmsg.LeaveGroupRequest:
		resp = s.leaveGroup(q)
	case *kmsg.OffsetCommitRequest:
		resp = s.offsetCommit(q)
	case *kmsg.OffsetFetchRequest:
		resp = s.offsetFetch(q)
	default:
		return nil, fmt.Errorf("API key %d not served", key)
	}
	if resp == nil { // produce with acks=0: no answer
		return nil, nil
	}
	return frameOf(corr, flex, resp), nil
}

func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tagged fields")
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		_, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return nil, errors.New("bad tagged fields")
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || uint64(len(b)-k1-k2) < l {
			return nil, errors.New("bad tagged fields")
		}
		b = b[k1+k2+int(l):]
	}
	return b, nil
}

// frameOf: length, correlation id, (empty tagged fields), the encoded response.
func frameOf(corr []byte, flex bool, resp kmsg.Response) net.Buffers {
	b := append(make([]byte, 4, 256), corr...)
	if flex {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return net.Buffers{b}
}

func (s *server) apiVersions(version int16, code int16) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	resp.ErrorCode = code
	keys := make([]int, 0, len(supported))
	for k := range supported {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		v := supported[int16(k)]
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MinVersion, ak.MaxVersion = int16(k), v[0], v[1]
		resp.ApiKeys = append(resp.ApiKeys, ak)
	}
	return resp
}

func (s *server) partitions(topic string) []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic]
}

func (s *server) metadata(q *kmsg.MetadataRequest) kmsg.Response {
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(q.Version)
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 0, s.host, s.port
	resp.Brokers = []kmsg.MetadataResponseBroker{b}
	cluster := "nullkafka"
	resp.ClusterID = &cluster
	resp.ControllerID = 0
	var names []string
	s.mu.Lock()
	if q.Topics == nil || (q.Version == 0 && len(q.Topics) == 0) {
		for name := range s.topics {
			names = append(names, name)
		}
		sort.Strings(names)
	} else {
		for _, t := range q.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, name := range names {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic = kmsg.StringPtr(name)
		parts, ok := s.topics[name]
		if !ok {
			t.ErrorCode = errUnknownTopic
		}
		for i := range parts {
			p := kmsg.NewMetadataResponseTopicPartition()
			p.Partition, p.Leader, p.LeaderEpoch = int32(i), 0, -1
			p.Replicas, p.ISR = []int32{0}, []int32{0}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	s.mu.Unlock()
	return resp
}

func (s *server) createTopics(q *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateTopicsResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range q.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		n := t.NumPartitions
		if n == -1 {
			n = 1
		}
		rt.NumPartitions, rt.ReplicationFactor = n, 1
		switch {
		case s.topics[t.Topic] != nil:
			rt.ErrorCode = errTopicAlreadyExists
		case n < 1 || n > 1024 || t.Topic == "":
			rt.ErrorCode = errInvalidPartitions
		case !q.ValidateOnly:
			parts := make([]*partition, n)
			for i := range parts {
				parts[i] = &partition{grew: make(chan struct{})}
			}
			s.topics[t.Topic] = parts
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *server) initProducerID(q *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	s.nextPID++
	resp.ProducerID, resp.ProducerEpoch = s.nextPID, 0
	s.mu.Unlock()
	return resp
}

// append checks a produce's batches (v2 headers, lengths, CRC) and stores them with their
// base offsets assigned; returns the first base offset, or an error code.
func (s *server) append(p *partition, records []byte) (int64, int16) {
	var batches [][]byte
	for rest := records; len(rest) > 0; {
		if len(rest) < batchHeaderLen {
			return -1, errCorruptMessage
		}
		l := int64(int32(binary.BigEndian.Uint32(rest[8:12]))) + 12
		if l < batchHeaderLen || l > int64(len(rest)) || rest[16] != 2 {
			return -1, errCorruptMessage
		}
		b := rest[:l]
		if crc32.Checksum(b[21:], castagnoli) != binary.BigEndian.Uint32(b[17:21]) {
			return -1, errCorruptMessage
		}
		if int32(binary.BigEndian.Uint32(b[23:27])) < 0 {
			return -1, errCorruptMessage
		}
		batches = append(batches, b)
		rest = rest[l:]
	}
	if len(batches) == 0 {
		return -1, errCorruptMessage
	}
	s.mu.Lock()
	if s.held+int64(len(records)) > s.maxBytes {
		s.mu.Unlock()
		return -1, errPolicyViolation
	}
	s.held += int64(len(records))
	s.mu.Unlock()
	p.mu.Lock()
	first := p.next
	for _, b := range batches {
		binary.BigEndian.PutUint64(b[0:8], uint64(p.next))
		binary.BigEndian.PutUint32(b[12:16], 0) // partitionLeaderEpoch
		p.batches = append(p.batches, b)
		p.bases = append(p.bases, p.next)
		p.next += int64(int32(binary.BigEndian.Uint32(b[23:27]))) + 1
	}
	close(p.grew)
	p.grew = make(chan struct{})
	p.mu.Unlock()
	return first, errNone
}

func (s *server) produce(q *kmsg.ProduceRequest) kmsg.Response {
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(q.Version)
	for _, t := range q.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		parts := s.partitions(t.Topic)
		for _, qp := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = qp.Partition
			if qp.Partition < 0 || int(qp.Partition) >= len(parts) {
				rp.ErrorCode = errUnknownTopic
			} else {
				rp.BaseOffset, rp.ErrorCode = s.append(parts[qp.Partition], qp.Records)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if q.Acks == 0 {
		return nil
	}
	return resp
}

// slice: the whole batches from the one holding offset, up to max bytes, and the high
// watermark. With first, the first batch goes whole even over max (the answer's first
// batch, as Kafka sends it: a consumer always makes progress).
func (p *partition) slice(offset int64, max int64, first bool) ([][]byte, int64, int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if offset < 0 || offset > p.next {
		return nil, p.next, errOffsetOutOfRange
	}
	if offset == p.next { // caught up: nothing yet
		return nil, p.next, errNone
	}
	// the last batch whose base offset is <= offset
	i := sort.Search(len(p.bases), func(i int) bool { return p.bases[i] > offset }) - 1
	if i < 0 {
		i = 0
	}
	var out [][]byte
	var n int64
	for ; i < len(p.batches); i++ {
		b := p.batches[i]
		if (len(out) > 0 || !first) && n+int64(len(b)) > max {
			break
		}
		out = append(out, b)
		n += int64(len(b))
	}
	return out, p.next, errNone
}

type fetchPart struct {
	id      int32
	code    int16
	hw      int64
	batches [][]byte
	size    int
}

// fetch: waits (up to MaxWaitMillis) for MinBytes, then answers by hand: a header, each
// partition's stored batches as they are, one writev.
func (s *server) fetch(q *kmsg.FetchRequest, corr []byte, flex bool) net.Buffers {
	deadline := time.Now().Add(time.Duration(q.MaxWaitMillis) * time.Millisecond)
	type fetchTopic struct {
		name  string
		parts []fetchPart
	}
	var topics []fetchTopic
	for {
		topics = topics[:0]
		total := int64(0)
		var wait []chan struct{}
		budget := int64(q.MaxBytes)
		if q.Version < 3 || budget <= 0 {
			budget = 1 << 62
		}
		for _, t := range q.Topics {
			ft := fetchTopic{name: t.Topic}
			parts := s.partitions(t.Topic)
			for _, qp := range t.Partitions {
				fp := fetchPart{id: qp.Partition, hw: -1}
				if qp.Partition < 0 || int(qp.Partition) >= len(parts) {
					fp.code = errUnknownTopic
				} else {
					p := parts[qp.Partition]
					max := int64(qp.PartitionMaxBytes)
					if budget < max {
						max = budget
					}
					fp.batches, fp.hw, fp.code = p.slice(qp.FetchOffset, max, total == 0)
					for _, b := range fp.batches {
						fp.size += len(b)
					}
					total += int64(fp.size)
					budget -= int64(fp.size)
					if fp.size == 0 && fp.code == errNone {
						p.mu.Lock()
						wait = append(wait, p.grew)
						p.mu.Unlock()
					}
				}
				ft.parts = append(ft.parts, fp)
			}
			topics = append(topics, ft)
		}
		left := time.Until(deadline)
		// any bytes answer at once (the tools ask for fetch.min.bytes=1)
		if total > 0 || q.MinBytes <= 0 || left <= 0 || len(wait) == 0 {
			break
		}
		// nothing yet: wait for any of the partitions to grow, or the deadline
		woke := make(chan struct{})
		stop := make(chan struct{})
		for _, w := range wait {
			go func(w chan struct{}) {
				select {
				case <-w:
					select {
					case woke <- struct{}{}:
					case <-stop:
					}
				case <-stop:
				}
			}(w)
		}
		timer := time.NewTimer(left)
		select {
		case <-woke:
		case <-timer.C:
		}
		timer.Stop()
		close(stop)
	}

	// the answer, by hand, as kmsg would write FetchResponse v4-v12
	v := q.Version
	h := make([]byte, 4, 128)
	h = append(h, corr...)
	if flex {
		h = append(h, 0)
	}
	h = binary.BigEndian.AppendUint32(h, 0) // throttle
	if v >= 7 {
		h = binary.BigEndian.AppendUint16(h, 0) // error code
		h = binary.BigEndian.AppendUint32(h, 0) // session id: none (every fetch is a full one)
	}
	arrayLen := func(b []byte, n int) []byte {
		if flex {
			return binary.AppendUvarint(b, uint64(n)+1)
		}
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
	out := net.Buffers{}
	h = arrayLen(h, len(topics))
	for _, t := range topics {
		if flex {
			h = binary.AppendUvarint(h, uint64(len(t.name))+1)
		} else {
			h = binary.BigEndian.AppendUint16(h, uint16(len(t.name)))
		}
		h = append(h, t.name...)
		h = arrayLen(h, len(t.parts))
		for _, p := range t.parts {
			h = binary.BigEndian.AppendUint32(h, uint32(p.id))
			h = binary.BigEndian.AppendUint16(h, uint16(p.code))
			h = binary.BigEndian.AppendUint64(h, uint64(p.hw)) // high watermark
			h = binary.BigEndian.AppendUint64(h, uint64(p.hw)) // last stable offset
			if v >= 5 {
				h = binary.BigEndian.AppendUint64(h, 0) // log start offset
			}
			h = arrayLen(h, 0) // aborted transactions: none
			if v >= 11 {
				h = binary.BigEndian.AppendUint32(h, 0xffffffff) // preferred read replica: -1
			}
			if flex {
				h = binary.AppendUvarint(h, uint64(p.size)+1)
			} else {
				h = binary.BigEndian.AppendUint32(h, uint32(p.size))
			}
			if p.size > 0 {
				out = append(out, h)
				out = append(out, p.batches...)
				h = make([]byte, 0, 64)
			}
			if flex {
				h = append(h, 0) // partition tags
			}
		}
		if flex {
			h = append(h, 0) // topic tags
		}
	}
	if flex {
		h = append(h, 0) // response tags
	}
	out = append(out, h)
	n := 0
	for _, b := range out {
		n += len(b)
	}
	binary.BigEndian.PutUint32(out[0], uint32(n-4))
	return out
}

func (s *server) listOffsets(q *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	resp.SetVersion(q.Version)
	for _, t := range q.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		parts := s.partitions(t.Topic)
		for _, qp := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.LeaderEpoch = qp.Partition, -1, -1
			switch {
			case qp.Partition < 0 || int(qp.Partition) >= len(parts):
				rp.ErrorCode = errUnknownTopic
			case qp.Timestamp == -1: // latest
				p := parts[qp.Partition]
				p.mu.Lock()
				rp.Offset = p.next
				p.mu.Unlock()
			case qp.Timestamp == -2: // earliest
				rp.Offset = 0
			default: // a time look-up: not served
				rp.ErrorCode = errInvalidRequest
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *server) findCoordinator(q *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(q.Version)
	resp.NodeID, resp.Host, resp.Port = 0, s.host, s.port
	keys := q.CoordinatorKeys
	if q.Version < 4 {
		keys = []string{q.CoordinatorKey}
	}
	for _, k := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Host, c.Port = k, 0, s.host, s.port
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp
}

func (s *server) group(name string) *group {
	g := s.groups[name]
	if g == nil {
		g = &group{offsets: map[string]map[int32]int64{}}
		s.groups[name] = g
	}
	return g
}

// joinGroup: the joining member becomes the group's only member and its leader.
func (s *server) joinGroup(q *kmsg.JoinGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	member := q.MemberID
	if member == "" {
		s.nextMember++
		member = "nullkafka-member-" + strconv.FormatInt(s.nextMember, 10)
		if q.Version >= 4 { // KIP-394: the member id first, then the join
			resp.ErrorCode, resp.MemberID, resp.Generation = errMemberIDRequired, member, -1
			return resp
		}
	}
	if len(q.Protocols) == 0 {
		resp.ErrorCode = errInvalidRequest
		return resp
	}
	g := s.group(q.Group)
	g.generation++
	g.member = member
	g.protocol = q.Protocols[0].Name
	g.assignment = nil
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(q.ProtocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID, resp.MemberID = member, member
	m := kmsg.NewJoinGroupResponseMember()
	m.MemberID, m.ProtocolMetadata = member, q.Protocols[0].Metadata
	resp.Members = []kmsg.JoinGroupResponseMember{m}
	return resp
}

// check: the member and generation of the group's current membership, else an error code.
func (s *server) check(name, member string, generation int32) (*group, int16) {
	g := s.groups[name]
	switch {
	case g == nil || g.member != member:
		return nil, errUnknownMemberID
	case g.generation != generation:
		return nil, errIllegalGeneration
	}
	return g, errNone
}

func (s *server) syncGroup(q *kmsg.SyncGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	g, code := s.check(q.Group, q.MemberID, q.Generation)
	if code != errNone {
		resp.ErrorCode = code
		return resp
	}
	for _, a := range q.GroupAssignment {
		if a.MemberID == q.MemberID {
			g.assignment = a.MemberAssignment
		}
	}
	resp.ProtocolType = q.ProtocolType
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.MemberAssignment = g.assignment
	return resp
}

func (s *server) heartbeat(q *kmsg.HeartbeatRequest) kmsg.Response {
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, resp.ErrorCode = s.check(q.Group, q.MemberID, q.Generation)
	if resp.ErrorCode == errIllegalGeneration {
		resp.ErrorCode = errRebalanceInProgress
	}
	return resp
}

func (s *server) leaveGroup(q *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	leave := func(member string) int16 {
		g := s.groups[q.Group]
		if g == nil || g.member != member {
			return errUnknownMemberID
		}
		g.member, g.assignment = "", nil
		g.generation++
		return errNone
	}
	if q.Version < 3 {
		resp.ErrorCode = leave(q.MemberID)
		return resp
	}
	for _, m := range q.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
		rm.ErrorCode = leave(m.MemberID)
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

func (s *server) offsetCommit(q *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	code := int16(errNone)
	var g *group
	if q.Generation >= 0 || q.MemberID != "" {
		g, code = s.check(q.Group, q.MemberID, q.Generation)
	} else { // a commit from outside any generation (a simple consumer)
		g = s.group(q.Group)
	}
	for _, t := range q.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == errNone {
				if g.offsets[t.Topic] == nil {
					g.offsets[t.Topic] = map[int32]int64{}
				}
				g.offsets[t.Topic][p.Partition] = p.Offset
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (s *server) offsetFetch(q *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.SetVersion(q.Version)
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[q.Group]
	lookup := func(topic string, part int32) int64 {
		if g == nil || g.offsets[topic] == nil {
			return -1
		}
		if o, ok := g.offsets[topic][part]; ok {
			return o
		}
		return -1
	}
	topics := q.Topics
	if topics == nil && g != nil { // all the group's committed offsets
		for name, parts := range g.offsets {
			t := kmsg.NewOffsetFetchRequestTopic()
			t.Topic = name
			for p := range parts {
				t.Partitions = append(t.Partitions, p)
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, lookup(t.Topic, p), -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

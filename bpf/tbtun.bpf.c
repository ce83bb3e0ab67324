// SPDX-License-Identifier: GPL-2.0
/* tbtun: a rule-based VXLAN/Geneve tunnel in two tc programs on one underlay device.
 *
 * tb_encap (tc egress): a packet routed into the tunnel (IPv4: its route carries the tbtun
 * realm; IPv6, whose routes have no realm: its next hop's neighbour entry is the marker MAC)
 * is looked up by inner destination in an LPM map (tb_rules4, tb_rules6); the rule gives the remote
 * underlay address, VNI, UDP port and encap kind. bpf_skb_adjust_room(+50, MAC, FIXED_GSO |
 * ENCAP_L3_IPV4 | ENCAP_L4_UDP | ENCAP_L2(14) | ENCAP_L2_ETH) opens room after the outer
 * Ethernet header and marks a GSO skb as UDP-tunnel GSO, so it is segmented after encap
 * (by the NIC or in software) and keeps its gso_size. Headers are then written in place (the
 * room is in the linear head; a helper store only as the fallback);
 * an IPv6 packet's outer MACs come from bpf_fib_lookup towards the remote.
 * Packets without the realm (the underlay's own traffic) pass untouched; tunnel-routed
 * packets without a rule are dropped and counted.
 *
 * tb_decap (tc ingress): IPv4 UDP to our address and one of our ports with a VXLAN or
 * Geneve header and an IPv4/IPv6 inner packet: adjust_room(-len, MAC, FIXED_GSO |
 * DECAP_L3_*) removes outer IP/UDP/tunnel/inner Ethernet; the outer Ethernet header stays
 * (its type is rewritten to the inner family). FIXED_GSO on decap keeps gso_size of a
 * GRO-merged skb (Calico's len <= gso_size drop in tcp_gso_segment).
 *
 * tb_xdp_decap (XDP, the alternative to tb_decap: loader option decap=xdp): the same checks
 * on the raw frame; the outer Ethernet header is moved forward over the stripped headers and
 * bpf_xdp_adjust_head drops them before any skb exists. XDP sees one wire frame at a time
 * (veth without frags support turns its peer's GSO off), so GRO after XDP_PASS rebuilds
 * large inner skbs.
 *
 * Settings live in the tb_config array map, written by the loader: one object serves every
 * site, nothing is recompiled per site. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/if_link.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "tbtun.h"

/* Newer than the uapi headers of Debian 12 (6.1): kernels >= 6.3 take it (tb_decap). */
#define TB_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)

#define TB_TUN_HLEN 8                                  /* VXLAN, Geneve without options */
#define TB_OVERHEAD (sizeof(struct iphdr) + sizeof(struct udphdr) + TB_TUN_HLEN + ETH_HLEN)
#define TB_SPORT_MIN 32768                             /* the kernel's tunnel source ports */
#define TB_SPORT_MAX 60999
#define ETH_P_TEB_ 0x6558
#define AF_INET_ 2

char LICENSE[] SEC("license") = "GPL";

/* skb->data / skb->data_end, read fresh where they are used: the barrier keeps clang from
 * reusing a ctx+offset address it computed earlier, which the verifier rejects ("dereference
 * of modified ctx ptr"). Re-read after every helper that moves the packet. */
#define PKT_DATA(skb) ({ barrier_var(skb); (void *)(long)(skb)->data; })
#define PKT_END(skb) ({ barrier_var(skb); (void *)(long)(skb)->data_end; })

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, TB_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct tb_key4);
	__type(value, struct tb_rule);
} tb_rules4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, TB_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct tb_key6);
	__type(value, struct tb_rule);
} tb_rules6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TB_MAX_RULES);
	__type(key, __u32);
	__type(value, struct tb_counter);
} tb_rule_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TB_STAT_MAX);
	__type(key, __u32);
	__type(value, struct tb_counter);
} tb_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tb_config);
} tb_config SEC(".maps");

/* What goes between the outer Ethernet header and the inner IP packet. */
struct tb_outer {
	struct iphdr ip;
	struct udphdr udp;
	__be32 tun[2];             /* VXLAN or Geneve base header */
	struct ethhdr inner;
};                                                     /* 50 bytes used, 52 with padding */

static __always_inline void count(__u32 slot, __u64 bytes)
{
	struct tb_counter *c = bpf_map_lookup_elem(&tb_stats, &slot);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline void count_rule(__u32 id, __u64 bytes)
{
	struct tb_counter *c = bpf_map_lookup_elem(&tb_rule_stats, &id);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline int drop(__u32 slot, __u64 bytes)
{
	count(slot, bytes);
	return TC_ACT_SHOT;
}

static __always_inline struct tb_config *config(void)
{
	__u32 zero = 0;
	struct tb_config *cfg = bpf_map_lookup_elem(&tb_config, &zero);

	return cfg && cfg->version == TB_LAYOUT_VERSION ? cfg : 0;
}

/* The rule for the inner destination of an Ethernet frame, or 0. The address is read in
 * place when the headers are in the skb's linear part (always for a locally sent packet),
 * else copied out. */
static __always_inline struct tb_rule *lookup(struct __sk_buff *skb, __u16 proto)
{
	void *data = PKT_DATA(skb), *end = PKT_END(skb);

	if (proto == bpf_htons(ETH_P_IP)) {
		struct tb_key4 k = { .prefixlen = 32 };
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) <= end)
			__builtin_memcpy(k.addr, &ip->daddr, 4);
		else if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, daddr), k.addr, 4))
			return 0;
		return bpf_map_lookup_elem(&tb_rules4, &k);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct tb_key6 k = { .prefixlen = 128 };
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) <= end)
			__builtin_memcpy(k.addr, &ip6->daddr, 16);
		else if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, daddr),
					    k.addr, 16))
			return 0;
		return bpf_map_lookup_elem(&tb_rules6, &k);
	}
	return 0;
}

/* The IPv4 header checksum, folded in the program (no helper call for 20 bytes). */
static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static __always_inline void fill(struct tb_outer *h, const struct tb_rule *r,
				 const struct tb_config *cfg, __u32 outer_len, __u16 sport,
				 const __u8 *src_mac, __u16 proto)
{
	__builtin_memset(h, 0, sizeof(*h));
	h->ip.version = 4;
	h->ip.ihl = 5;
	h->ip.tot_len = bpf_htons(outer_len);
	h->ip.frag_off = bpf_htons(0x4000);                /* DF: never fragmented */
	h->ip.ttl = 64;
	h->ip.protocol = IPPROTO_UDP;
	__builtin_memcpy(&h->ip.saddr, cfg->local4, 4);
	__builtin_memcpy(&h->ip.daddr, r->remote, 4);
	h->ip.check = ip_csum(&h->ip);
	h->udp.source = bpf_htons(sport);
	h->udp.dest = r->port;
	h->udp.len = bpf_htons(outer_len - sizeof(struct iphdr));
	h->udp.check = 0;                                  /* IPv4: zero, as the kernel's default */
	if (r->kind == TB_ENCAP_GENEVE) {
		h->tun[0] = bpf_htonl(ETH_P_TEB_);             /* ver 0, no options, TEB */
		h->tun[1] = bpf_htonl(r->vni << 8);
	} else {
		h->tun[0] = bpf_htonl(0x08000000);             /* I flag: VNI valid */
		h->tun[1] = bpf_htonl(r->vni << 8);
	}
	__builtin_memcpy(h->inner.h_dest, r->inner_mac, ETH_ALEN);
	__builtin_memcpy(h->inner.h_source, src_mac, ETH_ALEN);
	h->inner.h_proto = proto;
}

/* Is this packet routed into the tunnel? IPv4: its route carries the tbtun realm. IPv6
 * routes have no realm: they go via a link-local next hop whose permanent neighbour entry is
 * the marker MAC (tb_config.marker), so the frame's destination says it. */
static __always_inline int tunnel_bound(struct __sk_buff *skb, const struct tb_config *cfg,
					__u16 proto)
{
	__u8 dst[ETH_ALEN];

	if (proto == bpf_htons(ETH_P_IP))
		return (bpf_get_route_realm(skb) & 0xffff) == cfg->realm;
	if (proto != bpf_htons(ETH_P_IPV6) || bpf_skb_load_bytes(skb, 0, dst, ETH_ALEN))
		return 0;
	for (int i = 0; i < ETH_ALEN; i++)
		if (dst[i] != cfg->marker[i])
			return 0;
	return 1;
}

/* Outer Ethernet addresses towards the rule's remote from the FIB and neighbour table (the
 * marker MAC of an IPv6 packet must not reach the wire): 0 when written, 1 when the
 * neighbour is not resolved yet (the caller redirects through the kernel's neighbour code,
 * which resolves it), -1 on failure. */
static __always_inline int outer_macs(struct __sk_buff *skb, const struct tb_rule *r,
				      const struct tb_config *cfg)
{
	struct bpf_fib_lookup fib = {};
	int ret;

	fib.family = AF_INET_;
	fib.ifindex = skb->ifindex;
	__builtin_memcpy(&fib.ipv4_src, cfg->local4, 4);
	__builtin_memcpy(&fib.ipv4_dst, r->remote, 4);
	ret = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT | BPF_FIB_LOOKUP_OUTPUT);
	if (ret == BPF_FIB_LKUP_RET_NO_NEIGH)
		return 1;
	if (ret != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) ||
	    bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0))
		return -1;
	return 0;
}

/* The outer headers and the outer Ethernet type into the room adjust_room opened, stored in
 * place. 0 or -1. */
static __always_inline int write_outer(struct __sk_buff *skb, const struct tb_outer *h,
				       __be16 ip4)
{
	void *data = PKT_DATA(skb), *end = PKT_END(skb);
	struct ethhdr *eth = data;

	/* bpf_skb_adjust_room pushes the room into the linear head (skb_cow_head, then
	 * skb_push), so it is always there; the check is for the verifier, and a miss would
	 * be a kernel change: dropped and counted as an encap error, never half written. */
	if (data + ETH_HLEN + TB_OVERHEAD > end)
		return -1;
	__builtin_memcpy(data + ETH_HLEN, h, TB_OVERHEAD);
	eth->h_proto = ip4;
	return 0;
}

SEC("tc")
int tb_encap(struct __sk_buff *skb)
{
	struct tb_config *cfg = config();
	struct tb_outer h;
	struct tb_rule *r;
	struct ethhdr *eth;
	__u8 src_mac[ETH_ALEN];
	__u32 len = skb->len, hash;
	__u16 proto = skb->protocol, sport;
	__be16 ip4 = bpf_htons(ETH_P_IP);
	__u64 flags;

	if (!cfg || !tunnel_bound(skb, cfg, proto))
		return TC_ACT_OK;
	r = lookup(skb, proto);
	if (!r || r->family != 4)
		return drop(TB_STAT_NO_RULE, len);
	if (!skb->gso_size && len - ETH_HLEN + TB_OVERHEAD > cfg->mtu)
		return drop(TB_STAT_OVERSIZE, len);
	eth = PKT_DATA(skb);
	if ((void *)(eth + 1) <= PKT_END(skb))
		__builtin_memcpy(src_mac, eth->h_source, ETH_ALEN);
	else if (bpf_skb_load_bytes(skb, offsetof(struct ethhdr, h_source), src_mac, ETH_ALEN))
		return drop(TB_STAT_ENCAP_ERR, len);

	hash = bpf_get_hash_recalc(skb);
	sport = TB_SPORT_MIN + (__u16)(((__u64)hash * (TB_SPORT_MAX - TB_SPORT_MIN + 1)) >> 32);
	flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
		BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN);
	if (bpf_skb_adjust_room(skb, TB_OVERHEAD, BPF_ADJ_ROOM_MAC, flags))
		return drop(TB_STAT_ENCAP_ERR, len);
	fill(&h, r, cfg, len - ETH_HLEN + TB_OVERHEAD, sport, src_mac, proto);
	if (write_outer(skb, &h, ip4))
		return drop(TB_STAT_ENCAP_ERR, len);
	if (proto != ip4) {
		int macs = outer_macs(skb, r, cfg);

		if (macs < 0)
			return drop(TB_STAT_ENCAP_ERR, len);
		if (macs > 0) {
			struct bpf_redir_neigh nh = { .nh_family = AF_INET_ };

			__builtin_memcpy(&nh.ipv4_nh, r->remote, 4);
			count_rule(r->id, len);
			count(TB_STAT_ENCAP, len);
			return bpf_redirect_neigh(skb->ifindex, &nh, sizeof(nh), 0);
		}
	}

	count_rule(r->id, len);
	count(TB_STAT_ENCAP, len);
	return TC_ACT_OK;
}

/* Outer headers of a tunnel packet as received (up to and including the inner Ethernet
 * header of an option-less VXLAN/Geneve packet). */
struct tb_rx {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	__be32 tun[2];
} __attribute__((packed));

SEC("tc")
int tb_decap(struct __sk_buff *skb)
{
	struct tb_config *cfg = config();
	struct tb_rx h;
	void *data, *end;
	__u32 hlen, len = skb->len;
	__u16 inner;
	__u32 daddr, local;
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO;

	if (!cfg || skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	data = PKT_DATA(skb);
	end = PKT_END(skb);
	if (data + sizeof(h) <= end)                       /* in place: no copy */
		__builtin_memcpy(&h, data, sizeof(h));
	else if (bpf_skb_load_bytes(skb, 0, &h, sizeof(h)))
		return TC_ACT_OK;
	daddr = h.ip.daddr;
	__builtin_memcpy(&local, cfg->local4, 4);
	if (h.ip.ihl != 5 || h.ip.protocol != IPPROTO_UDP || daddr != local ||
	    (h.ip.frag_off & bpf_htons(0x3fff)))             /* fragments: leave to the stack */
		return TC_ACT_OK;
	if (cfg->vxlan_port && h.udp.dest == cfg->vxlan_port) {
		if (!(h.tun[0] & bpf_htonl(0x08000000)))
			return drop(TB_STAT_DECAP_ERR, len);
		hlen = TB_TUN_HLEN;
	} else if (cfg->geneve_port && h.udp.dest == cfg->geneve_port) {
		__u32 w = bpf_ntohl(h.tun[0]);

		if ((w >> 30) != 0 || (w & 0xffff) != ETH_P_TEB_)
			return drop(TB_STAT_DECAP_ERR, len);
		hlen = TB_TUN_HLEN + ((w >> 24) & 0x3f) * 4;   /* options are skipped */
	} else {
		return TC_ACT_OK;
	}
	if (bpf_skb_load_bytes(skb, sizeof(h) + (hlen - TB_TUN_HLEN) + 12, &inner, 2))
		return drop(TB_STAT_DECAP_ERR, len);
	/* The outer header is IPv4: an IPv4 packet inside needs no L3 flag (skb->protocol stays
	 * right), so it decapsulates on kernels without the DECAP_L3 flags (< 6.3, e.g. Debian
	 * 12's 6.1, which rejects unknown flags with -EINVAL). IPv6 inside needs
	 * DECAP_L3_IPV6 to set skb->protocol: on < 6.3 such packets fail here and are counted
	 * as decap errors (the driver records it; XDP decap carries them on any kernel). */
	if (inner == bpf_htons(ETH_P_IPV6))
		flags |= TB_F_ADJ_ROOM_DECAP_L3_IPV6;
	else if (inner != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;                          /* ARP & co.: not ours to carry */
	hlen += sizeof(struct iphdr) + sizeof(struct udphdr) + ETH_HLEN;
	if (bpf_skb_adjust_room(skb, -(__s32)hlen, BPF_ADJ_ROOM_MAC, flags))
		return drop(TB_STAT_DECAP_ERR, len);
	data = PKT_DATA(skb);
	end = PKT_END(skb);
	if (data + ETH_HLEN <= end)
		((struct ethhdr *)data)->h_proto = inner;
	else if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &inner, 2, 0))
		return drop(TB_STAT_DECAP_ERR, len);
	count(TB_STAT_DECAP, len - hlen);
	return TC_ACT_OK;
}

/* tb_decap's checks on an XDP frame: the number of bytes between the outer Ethernet header
 * and the inner IP packet to strip, 0 when the frame is not ours, -1 when it is malformed.
 * The inner Ethernet type is written to *inner. */
static __always_inline int xdp_strip_len(void *data, void *end, const struct tb_config *cfg,
					 __u16 *inner)
{
	struct tb_rx *h = data;
	struct ethhdr *ie;
	__u32 local, opt = 0;

	if ((void *)(h + 1) > end || h->eth.h_proto != bpf_htons(ETH_P_IP))
		return 0;
	__builtin_memcpy(&local, cfg->local4, 4);
	if (h->ip.ihl != 5 || h->ip.protocol != IPPROTO_UDP || h->ip.daddr != local ||
	    (h->ip.frag_off & bpf_htons(0x3fff)))
		return 0;
	if (cfg->vxlan_port && h->udp.dest == cfg->vxlan_port) {
		if (!(h->tun[0] & bpf_htonl(0x08000000)))
			return -1;
	} else if (cfg->geneve_port && h->udp.dest == cfg->geneve_port) {
		__u32 w = bpf_ntohl(h->tun[0]);

		if ((w >> 30) != 0 || (w & 0xffff) != ETH_P_TEB_)
			return -1;
		opt = ((w >> 24) & 0x3f) * 4;
	} else {
		return 0;
	}
	ie = data + sizeof(*h) + opt;
	if ((void *)(ie + 1) > end)
		return -1;
	if (ie->h_proto != bpf_htons(ETH_P_IP) && ie->h_proto != bpf_htons(ETH_P_IPV6))
		return 0;                                  /* ARP & co.: not ours to carry */
	*inner = ie->h_proto;
	return sizeof(struct iphdr) + sizeof(struct udphdr) + TB_TUN_HLEN + opt + ETH_HLEN;
}

SEC("xdp")
int tb_xdp_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct tb_config *cfg = config();
	struct ethhdr eth, *out;
	__u32 len = end - data;
	__u16 inner = 0;
	int strip;

	if (!cfg)
		return XDP_PASS;
	strip = xdp_strip_len(data, end, cfg, &inner);
	if (strip == 0)
		return XDP_PASS;
	if (strip < 0 || data + sizeof(eth) > end) {
		count(TB_STAT_DECAP_ERR, len);
		return XDP_DROP;
	}
	__builtin_memcpy(&eth, data, sizeof(eth));
	eth.h_proto = inner;
	if (bpf_xdp_adjust_head(ctx, strip)) {
		count(TB_STAT_DECAP_ERR, len);
		return XDP_DROP;
	}
	out = (void *)(long)ctx->data;
	if ((void *)(out + 1) > (void *)(long)ctx->data_end) {
		count(TB_STAT_DECAP_ERR, len);
		return XDP_DROP;
	}
	__builtin_memcpy(out, &eth, sizeof(eth));
	count(TB_STAT_DECAP, len - strip);
	return XDP_PASS;
}

// SPDX-License-Identifier: GPL-2.0
/* The floor of a tc tunnel built on bpf_skb_adjust_room, for bench/bench_tbtun.py (variant
 * adjust-room-floor): the least a VXLAN encap/decap pair in tc can do. No map, no rule
 * lookup, no counter, no hash: every IPv4 packet leaving the device is wrapped in an outer
 * IPv4/UDP/VXLAN/Ethernet header copied from its own addresses (so the pair must be the
 * underlay's own addresses, as in the native kind), and every IPv4 UDP packet to port 4789
 * arriving on it is unwrapped. Not a tunnel anyone should use: it measures what the kernel's
 * part (adjust_room, the UDP-tunnel GSO skb on veth, the tc hooks) costs by itself, so
 * tbtun's figure can be split into what its own work costs and what no tc tunnel avoids. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define HLEN (sizeof(struct iphdr) + sizeof(struct udphdr) + 8 + ETH_HLEN)
#define PKT_DATA(skb) ({ barrier_var(skb); (void *)(long)(skb)->data; })
#define PKT_END(skb) ({ barrier_var(skb); (void *)(long)(skb)->data_end; })

char LICENSE[] SEC("license") = "GPL";

struct outer {
	struct iphdr ip;
	struct udphdr udp;
	__be32 vx[2];
	struct ethhdr inner;
};                                     /* HLEN (50) bytes used */

SEC("tc")
int floor_encap(struct __sk_buff *skb)
{
	struct ethhdr *eth = PKT_DATA(skb);
	struct iphdr *ip = (void *)(eth + 1);
	__u32 len = skb->len - ETH_HLEN + HLEN, sum = 0;
	struct outer h = {};
	__u16 *w = (__u16 *)&h.ip;

	if ((void *)(ip + 1) > PKT_END(skb) || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	h.ip.version = 4;
	h.ip.ihl = 5;
	h.ip.tot_len = bpf_htons(len);
	h.ip.frag_off = bpf_htons(0x4000);
	h.ip.ttl = 64;
	h.ip.protocol = IPPROTO_UDP;
	h.ip.saddr = ip->saddr;
	h.ip.daddr = ip->daddr;
	for (int i = 0; i < (int)(sizeof(h.ip) / 2); i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	h.ip.check = ~((sum & 0xffff) + (sum >> 16));
	h.udp.source = bpf_htons(49152);
	h.udp.dest = bpf_htons(4789);
	h.udp.len = bpf_htons(len - sizeof(struct iphdr));
	h.vx[0] = bpf_htonl(0x08000000);
	h.vx[1] = bpf_htonl(1 << 8);
	__builtin_memcpy(&h.inner, eth, ETH_HLEN);
	if (bpf_skb_adjust_room(skb, HLEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO |
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
				BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN)))
		return TC_ACT_SHOT;
	eth = PKT_DATA(skb);
	if ((void *)eth + ETH_HLEN + HLEN > PKT_END(skb))
		return TC_ACT_SHOT;
	__builtin_memcpy((void *)eth + ETH_HLEN, &h, HLEN);
	return TC_ACT_OK;
}

SEC("tc")
int floor_decap(struct __sk_buff *skb)
{
	struct ethhdr *eth = PKT_DATA(skb);
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);

	if ((void *)(udp + 1) > PKT_END(skb) || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(4789))
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -(__s32)HLEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

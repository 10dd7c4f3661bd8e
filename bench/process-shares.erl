%% Evaluated on the broker by bench/broker-profile.sh (rabbitmqctl eval, so
%% a sequence of expressions, not a module). Over Secs seconds it measures
%% how busy each scheduler was and which processes did the work: the
%% reductions (units of work of the Erlang VM) each process used, as a
%% share of all of them, biggest first. Names say what a process is:
%% rabbit_prequeue is a classic queue, ra_server_proc a quorum queue,
%% ra_log_wal the quorum queues' write-ahead log, rabbit_channel a channel
%% (with its number and whether it is in confirm mode), rabbit_reader and
%% rabbit_writer the two halves of a client connection; amqp_channel,
%% rabbit_shovel_worker and amqp_gen_consumer belong to the shovel.
Secs = 1.5,
Snap = fun() -> maps:from_list([{P, R} || P <- processes(), {reductions, R} <- [process_info(P, reductions)]]) end,
erlang:system_flag(scheduler_wall_time, true),
W0 = lists:sort(erlang:statistics(scheduler_wall_time)),
S0 = Snap(),
timer:sleep(round(Secs * 1000)),
S1 = Snap(),
W1 = lists:sort(erlang:statistics(scheduler_wall_time)),
Busy = [{Id, round(100 * (A1 - A0) / max(1, T1 - T0))} || {{Id, A0, T0}, {Id, A1, T1}} <- lists:zip(W0, W1)],
Used = lists:reverse(lists:keysort(2, [{P, R - maps:get(P, S0, 0)} || {P, R} <- maps:to_list(S1)])),
Total = max(1, lists:sum([R || {_, R} <- Used])),
What = fun(P) ->
    case process_info(P, dictionary) of
        {dictionary, D} ->
            case proplists:get_value('$initial_call', D) of
                {rabbit_channel, _, _} = C ->
                    case catch rabbit_channel:info(P, [number, confirm]) of
                        [{number, N}, {confirm, Cf}] -> io_lib:format("rabbit_channel ~p~s", [N, if Cf -> " (confirm)"; true -> "" end]);
                        _ -> io_lib:format("~p", [element(1, C)])
                    end;
                {M, _, _} ->
                    case process_info(P, registered_name) of
                        {registered_name, Nm} when Nm =/= M -> io_lib:format("~p ~p", [M, Nm]);
                        _ -> atom_to_list(M)
                    end;
                _ -> case process_info(P, registered_name) of {registered_name, Nm} -> atom_to_list(Nm); _ -> "other" end
            end;
        _ -> "exited"
    end
end,
io:format("schedulers busy (%, by id):~s~n", [[io_lib:format(" ~p:~p", [I, B]) || {I, B} <- Busy]]),
[io:format("~6.1f%  ~s~n", [100 * R / Total, What(P)]) || {P, R} <- lists:sublist(Used, 10)],
ok.

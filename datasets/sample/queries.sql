SELECT count(*) FROM musician
SELECT name ,  instrument FROM musician ORDER BY birth_year DESC
SELECT DISTINCT nationality FROM musician
SELECT name FROM orchestra WHERE city  =  'Lyon'
SELECT name FROM hall WHERE capacity  >  1500 AND city  =  "Porto"
SELECT avg(salary) ,  min(salary) ,  max(salary) FROM musician WHERE instrument  =  'viola'
SELECT title FROM piece WHERE composer LIKE '%Sibelius%'
SELECT title ,  duration_min FROM piece WHERE duration_min BETWEEN 20 AND 45 ORDER BY duration_min
SELECT name FROM conductor WHERE age  <  40 OR age  >=  75
SELECT instrument ,  count(*) FROM musician GROUP BY instrument
SELECT instrument FROM musician GROUP BY instrument HAVING count(*)  >  3 ORDER BY count(*) DESC
SELECT city ,  sum(capacity) FROM hall GROUP BY city ORDER BY sum(capacity) DESC LIMIT 3
SELECT T1.name ,  T2.name FROM orchestra AS T1 JOIN conductor AS T2 ON T1.conductor_id  =  T2.conductor_id
SELECT T1.name FROM musician AS T1 JOIN membership AS T2 ON T1.musician_id  =  T2.musician_id JOIN orchestra AS T3 ON T2.orchestra_id  =  T3.orchestra_id WHERE T3.name  =  "Baltic Chamber Players"
SELECT T3.title FROM concert AS T1 JOIN program AS T2 ON T1.concert_id  =  T2.concert_id JOIN piece AS T3 ON T2.piece_id  =  T3.piece_id WHERE T1.concert_date  =  '2023-05-14' ORDER BY T2.position ASC
SELECT T2.name ,  count(*) FROM concert AS T1 JOIN hall AS T2 ON T1.hall_id  =  T2.hall_id GROUP BY T1.hall_id ORDER BY count(*) DESC LIMIT 1
SELECT name FROM musician WHERE salary  >  (SELECT avg(salary) FROM musician)
SELECT name FROM musician WHERE musician_id NOT IN (SELECT musician_id FROM membership)
SELECT title FROM piece WHERE piece_id IN (SELECT piece_id FROM program WHERE concert_id IN (SELECT concert_id FROM concert WHERE attendance  >  900))
SELECT name FROM orchestra WHERE founded_year  <  1900 UNION SELECT name FROM orchestra WHERE city  =  'Ghent'
SELECT composer FROM piece WHERE duration_min  >  60 INTERSECT SELECT composer FROM piece WHERE duration_min  <  10
SELECT name FROM hall EXCEPT SELECT T2.name FROM concert AS T1 JOIN hall AS T2 ON T1.hall_id  =  T2.hall_id
SELECT count(*) FROM (SELECT musician_id FROM membership WHERE seat  =  'principal' UNION SELECT musician_id FROM membership WHERE since_year  <  1995)
SELECT name FROM musician WHERE musician_id IN (SELECT musician_id FROM membership WHERE orchestra_id  =  2 EXCEPT SELECT musician_id FROM membership WHERE orchestra_id  =  5)
select name ,  birth_year from musician where nationality  =  'Chilean' order by birth_year asc limit 5
Select Count ( * ) From concert Where ticket_price  >=  35.5;
SELECT COUNT ( DISTINCT composer ) FROM piece
SELECT count(DISTINCT T1.orchestra_id) FROM membership AS T1 JOIN musician AS T2 ON T1.musician_id  =  T2.musician_id WHERE T2.instrument  =  "harp"
SELECT T1.concert_id ,  T1.attendance * T1.ticket_price FROM concert AS T1 ORDER BY T1.attendance * T1.ticket_price DESC LIMIT 10
SELECT name FROM hall WHERE capacity - 200  >  (SELECT max(attendance) FROM concert)
SELECT avg(attendance / capacity) FROM concert AS T1 JOIN hall AS T2 ON T1.hall_id  =  T2.hall_id
SELECT name ,  salary + 500 AS raised FROM musician WHERE NOT instrument  =  'drums'
SELECT title FROM piece WHERE composer NOT LIKE "Anon%" AND (duration_min  <  15 OR duration_min  >  90)
SELECT T1.name FROM orchestra AS T1 ,  conductor AS T2 WHERE T1.conductor_id  =  T2.conductor_id AND T2.age  !=  50
SELECT T1.name FROM orchestra AS T1 JOIN membership AS T2 ON T1.orchestra_id  =  T2.orchestra_id GROUP BY T1.orchestra_id HAVING count(*)  >=  40 INTERSECT SELECT name FROM orchestra WHERE city  <>  'Vienna'
SELECT city FROM hall GROUP BY city HAVING avg(capacity)  >  800 AND count(*)  >  1
SELECT name FROM conductor WHERE conductor_id NOT IN (SELECT conductor_id FROM orchestra WHERE founded_year BETWEEN 1950 AND 1999)
SELECT T1.name FROM musician AS T1 JOIN membership AS T2 ON T1.musician_id  =  T2.musician_id WHERE T2.since_year  =  (SELECT min(since_year) FROM membership)
SELECT seat ,  max(since_year) FROM membership GROUP BY seat ORDER BY seat
SELECT sub.city FROM (SELECT city ,  count(*) AS n FROM hall GROUP BY city) AS sub WHERE sub.n  >  2
SELECT DISTINCT T3.composer FROM orchestra AS T1 JOIN concert AS T2 ON T1.orchestra_id  =  T2.orchestra_id JOIN program AS T4 ON T2.concert_id  =  T4.concert_id JOIN piece AS T3 ON T4.piece_id  =  T3.piece_id WHERE T1.name  =  'Northern Lights Sinfonietta' AND T3.title LIKE 'Concerto%'
SELECT name FROM musician WHERE birth_year  >  1990 AND salary  <  (SELECT avg(salary) FROM musician WHERE instrument  =  'cello') ORDER BY name LIMIT 20;
